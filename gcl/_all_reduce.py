"""All-reduce = ring reduce-scatter + all-gather over each group, bit-identical on any layout.

References:
    GCL User Guide, "Collective operations" (AllReduce); P. Patarasuk and X. Yuan,
    "Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 2009.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gcl._all_gather import all_gather_packed, finish_replicas
from gcl._groups import Group
from gcl._operators import Operator
from gcl._recording import record
from gcl._reduce_scatter import reduce_scatter_replicas

if TYPE_CHECKING:
    from mpi4py import MPI


def all_reduce(
    values: Sequence[object],
    op: str | Operator = "add",
    *,
    method: str = "auto",
    group: Group | None = None,
    comm: MPI.Comm | None = None,
    timeout: float | None = None,
) -> list:
    """Reduce every leaf over each group of replicas; every member gets the full result.

    Args:
        values: one pytree of arrays (numpy or jax) per local replica; entry k is global
            replica ``instance * L + k``.
        op: "add", "mean" (ADD, then one division by the group size), "max", "min" or
            "mul", or a :class:`gcl.Operator`.
        method: "clockwise_ring", "anticlockwise_ring", "bidirectional_ring_pair",
            "meet_in_middle_ring" or "auto" (meet_in_middle_ring below 1 MiB per replica
            on groups of 3 or more, clockwise_ring otherwise: ``gcl.collective_method``).
        group: ``gcl.All()`` (None), ``gcl.Consecutive(k)`` or ``gcl.Orthogonal(k)``.
        comm: mpi4py communicator of the instances; None = a private duplicate of
            COMM_WORLD.
        timeout: seconds to wait for peers before raising ``gcl.CollectiveTimeout``.

    Returns:
        Per local replica, a pytree like its value with numpy leaves. Replicas of one
        group share the same read-only arrays (copy before writing in place).

    Raises:
        ValueError: replicas or instances disagree on structure, shapes, dtypes or options.
        gcl.CollectiveTimeout: a peer instance did not take part within ``timeout``.
    """
    started = time.perf_counter()
    s = reduce_scatter_replicas(values, "all_reduce", op, method, group, comm, timeout)
    out = all_gather_packed(
        s.call, s.rows, s.layout, s.group, s.transport, s.deadline, "all_reduce"
    )
    result = finish_replicas(s.call, out, s.layout, s.group, s.call.treedef)[s.mine]
    record("all_reduce", s.method, s.group, s.nbytes, started=started)
    return result
