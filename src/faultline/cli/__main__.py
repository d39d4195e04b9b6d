"""`python -m faultline.cli`: how the supervisor starts its child processes."""

import sys

from faultline._parent import end_with_supervisor
from faultline.cli import main

end_with_supervisor()
sys.exit(main())
