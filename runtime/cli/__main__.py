"""`python -m faultline.runtime.cli`: how the supervisor starts its child processes."""

import sys

from faultline.runtime.cli import main

sys.exit(main())
