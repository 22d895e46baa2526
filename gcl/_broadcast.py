"""Broadcast: every member of a group gets the value of the group's root (pure copies).

References:
    GCL User Guide, "Collective operations" (Broadcast).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from gcl._all_gather import finish_replicas, local_groups, run_copy_items
from gcl._buffers import POOL
from gcl._gathered import gather_if_small
from gcl._groups import Group, as_group, groups_of
from gcl._pytree import layout_of, pack
from gcl._recording import record
from gcl._reduce_scatter import routing_of
from gcl._routes import Item, broadcast_items, collective_method
from gcl._transport import deadline_of, transport_for
from gcl._validation import validate

if TYPE_CHECKING:
    from mpi4py import MPI


def broadcast(
    values: Sequence[object],
    *,
    root: int = 0,
    group: Group | None = None,
    comm: MPI.Comm | None = None,
    timeout: float | None = None,
) -> list:
    """Give every replica the value of the replica at position ``root`` of its group.

    Args:
        values: one pytree of arrays per local replica (every replica passes one, with the
            same structure, shapes and dtypes; only the root's data is used).
        root: the source's position within its group (0 = the group's first replica).
        group: ``gcl.All()`` (None), ``gcl.Consecutive(k)`` or ``gcl.Orthogonal(k)``.
        comm: mpi4py communicator of the instances; None = a private duplicate of
            COMM_WORLD.
        timeout: seconds to wait for peers before raising ``gcl.CollectiveTimeout``.

    Returns:
        Per local replica, its group root's pytree (numpy leaves, read-only, shared by the
        replicas of one group).
    """
    started = time.perf_counter()
    group = as_group(group)
    transport = transport_for(comm)
    deadline = deadline_of(timeout)
    single = transport.size == 1
    call = validate(
        values, None if single else transport, "broadcast", f"root={root}, group={group}", deadline
    )
    size = group.size(call.num_replicas)
    if not isinstance(root, int) or not 0 <= root < size:
        raise ValueError(
            f"gcl.broadcast: `root` is a position within the group, expected an integer in "
            f"[0, {size}), got {root!r}; pass e.g. root=0."
        )
    call, messaging, mine = gather_if_small(
        call, None if single else transport, deadline, "broadcast"
    )
    layout = layout_of([(leaf.shape, leaf.dtype) for leaf in call.leaves[0]], 1)
    offset = call.instance * call.local
    items = broadcast_items(routing_of(call, group, layout), root)
    groups = groups_of(group, call.num_replicas)
    out = {
        g: [POOL.empty((1, w), d) for d, w in zip(layout.dtypes, layout.widths, strict=True)]
        for g in local_groups(call, group)
    }

    packed: dict[int, list[np.ndarray]] = {}

    def source(it: Item) -> np.ndarray:
        root_replica = groups[it.group][root] - offset
        if root_replica not in packed:
            packed[root_replica] = pack(call.leaves[root_replica], layout)
        return packed[root_replica][it.dtype][0, it.col0 : it.col1]

    run_copy_items(messaging, items, call, out, lambda it: 0, source, deadline, "broadcast")
    result = finish_replicas(call, out, layout, group, call.treedef)[mine]
    nbytes = sum(leaf.nbytes for leaf in call.leaves[0])
    record(
        "broadcast", collective_method("broadcast", nbytes, size), group, nbytes, started=started
    )
    return result
