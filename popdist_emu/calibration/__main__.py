"""``python -m popdist_emu.calibration``: ``--calibrate-from``'s refit (``_cli``)."""

import sys

from popdist_emu.calibration._cli import main

sys.exit(main())
