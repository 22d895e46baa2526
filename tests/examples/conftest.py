"""The examples import their package (``examples/pipelined_training``) from the folder they
sit in, as Python puts a script's folder on ``sys.path``; the tests load them by path and
import the package themselves, so the folder goes on ``sys.path``."""

import sys
from pathlib import Path

EXAMPLES = str(Path(__file__).parents[2] / "examples")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)
