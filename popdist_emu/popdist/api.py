"""The PopDist Python API, read from the environment PopRun (here ``poprun-emu``) exports.

Names and defaults follow the PopDist reference, so unmodified host code runs: every getter
falls back to the single-instance, single-replica layout when PopRun did not start the process.

References:
    PopRun/PopDist User Guide, "Python API" (api_python.html,
    https://docs.graphcore.ai/projects/poprun-user-guide/en/latest/api_python.html).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from contract import InstanceEnvironment
from hardware import ReplicaLayout

_T = TypeVar("_T")
_P = ParamSpec("_P")

# The PopDist API's names, in one place: popdist_emu.popdist, popdist_emu and the popdist
# shim that instances import export them as ``from popdist_emu.popdist.api import *`` with
# ``__all__ += api.__all__``.
__all__ = [
    "checkNumIpusPerReplica",
    "execute_on_instances",
    "getDeviceId",
    "getInstanceIndex",
    "getLocalInstanceIndex",
    "getNumInstances",
    "getNumIpusPerReplica",
    "getNumLocalReplicas",
    "getNumTotalReplicas",
    "getReplicaIndexOffset",
    "init",
    "isPopdistEnvSet",
]
API_NAMES = tuple(__all__)


def _view() -> InstanceEnvironment:
    return InstanceEnvironment.from_environ(os.environ)


def _layout() -> tuple[ReplicaLayout, int]:
    view = _view()
    return view.layout, view.instance


def isPopdistEnvSet() -> bool:  # noqa: N802 - PopDist's name
    """Whether this process was started by PopRun, which exports the replica counts."""
    return _view().popdist_set


def getNumTotalReplicas() -> int:  # noqa: N802
    """Replicas of the whole job, over all instances."""
    return _layout()[0].num_replicas


def getNumLocalReplicas() -> int:  # noqa: N802
    """Replicas driven by this instance (the framework's replication factor); defaults to 1."""
    return _layout()[0].num_local_replicas


def getNumInstances() -> int:  # noqa: N802
    """Host instances of the job."""
    return _layout()[0].num_instances


def getInstanceIndex() -> int:  # noqa: N802
    """This instance's index in ``[0, getNumInstances())``."""
    return _layout()[1]


def getLocalInstanceIndex() -> int:  # noqa: N802
    """This instance's index among the instances of its host; 0 when unset."""
    return _view().local_instance_index


def getReplicaIndexOffset() -> int:  # noqa: N802
    """Global index of this instance's first replica."""
    layout, instance = _layout()
    return layout.replica_offset(instance)


def getNumIpusPerReplica() -> int:  # noqa: N802
    """IPUs per replica; defaults to 1."""
    return _layout()[0].ipus_per_replica


def checkNumIpusPerReplica(numIpusPerReplica: int) -> bool:  # noqa: N802, N803
    """Whether the program's IPUs per replica agree with what PopRun was given."""
    return int(numIpusPerReplica) == getNumIpusPerReplica()


def getDeviceId(ipusPerReplica: int = 0) -> int:  # noqa: N802, N803
    """The ID of the multi-IPU device that holds this instance's local replicas.

    Poplar numbers the single IPUs of a host's partition first (0..N-1), then its aligned
    groups of 2, 4, 8, ... IPUs, each size in order; an instance attaches to the group made
    of its own IPUs. ``ipusPerReplica=0`` means the value PopRun was given.

    References:
        Poplar and PopLibs User Guide, "Device manager" (multi-IPU device IDs).
    """
    layout, instance = _layout()
    ipr = ipusPerReplica or layout.ipus_per_replica
    if ipr not in (1, 2, 4, 8, 16):
        raise ValueError(
            f"getDeviceId: `ipusPerReplica` must be one of 1, 2, 4, 8, 16 (or 0 for the "
            f"launcher's value), got {ipusPerReplica}."
        )
    ipus_on_host = layout.num_ipus // len(layout.hosts)
    size = layout.num_local_replicas * ipr
    first_ipu = layout.local_instance_index(instance) * size
    base, group = 0, 1
    while group < size:
        base += ipus_on_host // group
        group *= 2
    return base + first_ipu // size


def init() -> None:
    """Initialises the host communication backend (MPI) of this instance."""
    # Imported here, not at module level: importing mpi4py.MPI initialises MPI, which a host
    # program that only reads its layout (``import popdist``) must not pay for or trigger.
    from mpi4py import MPI

    if not MPI.Is_initialized():
        MPI.Init()


def execute_on_instances(
    instances: set[int] | list[int] | tuple[int, ...] | range,
    func: Callable[_P, _T],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T | None:
    """Runs ``func(*args, **kwargs)`` on the given instances only; returns None elsewhere.

    Typical use is writing a checkpoint or a log from instance 0 only.
    """
    wanted = set(instances)
    n = getNumInstances()
    bad = sorted(i for i in wanted if not 0 <= i < n)
    if bad:
        raise ValueError(
            f"execute_on_instances: `instances` must lie in [0, {n}), got {bad}; "
            f"use getNumInstances() to size the set."
        )
    if getInstanceIndex() in wanted:
        return func(*args, **kwargs)
    return None
