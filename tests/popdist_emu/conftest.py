"""The test modules in popdist_emu's sub-package folders share the models beside this file.

``two_dense_blocks.py`` (one two-block pipeline model) serves the pipeline, programs and
runtime tests; its folder is put on ``sys.path`` here, explicitly, rather than relying on
which test folder pytest happens to insert first. No folder here may be named after a module
that instances import (``popdist``, ``poptorch``): on ``sys.path`` it would shadow the
fallback module, which is found last; so the PopDist API's tests live in ``popdist_api/``.
"""

import sys
from pathlib import Path

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
