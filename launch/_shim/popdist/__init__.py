"""``popdist`` inside ``poprun-emu`` instances: the emulator's PopDist API under PopDist's name.

The launcher puts this directory's parent on the instances' PYTHONPATH only, so unmodified host
code that does ``import popdist`` runs there, while outside the launcher nothing named
``popdist`` is importable.
"""

import sys

try:
    import popdist_emu as _emu
except ImportError as _error:  # a program run with another interpreter than poprun-emu's
    raise ImportError(
        f"popdist (poprun-emu's shim) needs the popdist_emu package, which this interpreter "
        f"({sys.executable}) cannot import: run the program with the Python poprun-emu is "
        f"installed for (give poprun-emu the script.py itself), or pip install popdist-emu "
        f"here."
    ) from _error

from popdist_emu import *  # noqa: F403 - the whole public PopDist API, by design

__all__ = list(_emu.__all__)


def __getattr__(name: str):
    # Names the emulator loads lazily (the runtime) resolve through popdist_emu.
    return getattr(_emu, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_emu.__all__))
