"""``popdist`` for host code run by ``poprun-emu`` (or plainly, through the fallback finder).

PopDist's Python API and nothing else: the functions of the PopDist reference and the
framework submodules ``popdist.poptorch``, ``popdist.tensorflow`` and ``popdist.popart``
(imported on first use, as ``import popdist.poptorch`` does). The emulator's own names live in
``popdist_emu``.

References:
    PopRun/PopDist User Guide, "Python API" (api_python.html).
"""

import sys as _sys

try:
    from popdist_emu.popdist import api as _api
    from popdist_emu.popdist.api import *  # noqa: F403 - the PopDist API, named once there
except ImportError as _error:  # a program run with another interpreter than poprun-emu's
    raise ImportError(
        f"popdist (poprun-emu's shim) needs the popdist_emu package, which this interpreter "
        f"({_sys.executable}) cannot import: run the program with the Python poprun-emu is "
        f"installed for (give poprun-emu the script.py itself), or pip install popdist-emu "
        f"here."
    ) from _error

_SUBMODULES = ("poptorch", "tensorflow", "popart")

__all__: list[str] = []
__all__ += _api.__all__


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'popdist' has no attribute {name!r} (PopDist's API only)")


def __dir__() -> list[str]:
    return sorted([*__all__, *_SUBMODULES])
