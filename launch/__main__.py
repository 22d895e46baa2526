"""``python -m launch`` is ``poprun-emu``."""

import sys

from launch._cli import main

sys.exit(main())
