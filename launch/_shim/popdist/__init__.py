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
    from popdist_emu.popdist import API_NAMES as _API_NAMES
    from popdist_emu.popdist import checkNumIpusPerReplica as checkNumIpusPerReplica
    from popdist_emu.popdist import execute_on_instances as execute_on_instances
    from popdist_emu.popdist import getDeviceId as getDeviceId
    from popdist_emu.popdist import getInstanceIndex as getInstanceIndex
    from popdist_emu.popdist import getLocalInstanceIndex as getLocalInstanceIndex
    from popdist_emu.popdist import getNumInstances as getNumInstances
    from popdist_emu.popdist import getNumIpusPerReplica as getNumIpusPerReplica
    from popdist_emu.popdist import getNumLocalReplicas as getNumLocalReplicas
    from popdist_emu.popdist import getNumTotalReplicas as getNumTotalReplicas
    from popdist_emu.popdist import getReplicaIndexOffset as getReplicaIndexOffset
    from popdist_emu.popdist import init as init
    from popdist_emu.popdist import isPopdistEnvSet as isPopdistEnvSet
except ImportError as _error:  # a program run with another interpreter than poprun-emu's
    raise ImportError(
        f"popdist (poprun-emu's shim) needs the popdist_emu package, which this interpreter "
        f"({_sys.executable}) cannot import: run the program with the Python poprun-emu is "
        f"installed for (give poprun-emu the script.py itself), or pip install popdist-emu "
        f"here."
    ) from _error

_SUBMODULES = ("poptorch", "tensorflow", "popart")

__all__ = list(_API_NAMES)


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'popdist' has no attribute {name!r} (PopDist's API only)")


def __dir__() -> list[str]:
    return sorted([*__all__, *_SUBMODULES])
