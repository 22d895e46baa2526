"""The repository's scripts as modules, loaded by path with their ``main`` not run: the
examples (``examples/<name>.py``) and the benchmarks (``benchmarks/<name>.py``).

The folder ``tests/`` is on ``sys.path`` (pytest puts the root ``conftest.py``'s folder
there), so every test file imports this one the same way wherever it lives.
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"
BENCHMARKS = ROOT / "benchmarks"


def _load(folder: Path, name: str, module_name: str) -> ModuleType:
    """``folder/<name>.py`` as ``module_name``, its folder on ``sys.path`` while it loads, as
    when it runs as a script (a benchmark imports its siblings: ``validate`` imports
    ``calibrate``)."""
    spec = importlib.util.spec_from_file_location(module_name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    added = str(folder) not in sys.path
    if added:
        sys.path.insert(0, str(folder))
    try:
        spec.loader.exec_module(module)
    finally:
        if added:
            sys.path.remove(str(folder))
    return module


def load_example(name: str) -> ModuleType:
    """``examples/<name>.py`` as a module; it imports the examples' package
    (``pipelined_training``) from the folder while it loads."""
    return _load(EXAMPLES, name, f"example_{name}")


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module."""
    return _load(BENCHMARKS, name, f"benchmark_{name}")
