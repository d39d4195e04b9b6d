"""`python -m faultline.cli`: how the supervisor starts its child processes."""

import sys

from faultline.cli import main

sys.exit(main())
