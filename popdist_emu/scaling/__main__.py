"""``python -m popdist_emu.scaling`` is ``poprun-emu-scaling`` (where no console script is on
PATH: a source tree, or an environment whose scripts folder is not on PATH)."""

import sys

from popdist_emu.scaling import main

sys.exit(main())
