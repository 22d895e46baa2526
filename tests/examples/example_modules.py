"""The examples as modules, loaded by path (their ``main`` not run)."""

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).parents[2] / "examples"


def load_example(name: str):
    """``examples/<name>.py`` as a module; ``conftest.py`` puts the folder on sys.path for the
    examples' shared ``_transformer``."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
