"""The examples import their shared module (``examples/_transformer.py``) as a sibling, as
they do when run as scripts; the tests load them by path, so the folder goes on sys.path."""

import sys
from pathlib import Path

EXAMPLES = str(Path(__file__).parents[2] / "examples")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)
