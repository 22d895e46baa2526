"""Ring reduce-scatter: each replica ends with its shard of the reduction over its group.

References:
    GCL User Guide, "Collective operations" (ReduceScatter); graphcore/popart user guide,
    "Tensor locations" (RTS shards of ceil(N/R) elements, zero-padded).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from gcl._buffers import POOL, Arena
from gcl._dataflow import run_items
from gcl._gathered import gather_if_small
from gcl._groups import Group, as_group, groups_of
from gcl._operators import Operator, as_operator, check_dtype, combine_into, finish_mean
from gcl._pytree import Layout, layout_of, pack, unflatten, unpack_rows
from gcl._recording import record
from gcl._routes import Item, Routing, as_method, collective_method, reduce_scatter_items
from gcl._transport import Transport, deadline_of, transport_for
from gcl._validation import Call, validate

if TYPE_CHECKING:
    from mpi4py import MPI

# Pieces of this many bytes are pipelined: one is combined while the next is in flight.
PIECE_BYTES = int(os.environ.get("GCL_EMU_PIECE_BYTES", str(1 << 20)))


def routing_of(call: Call, group: Group, layout: Layout) -> Routing:
    """The routing of a call's collective over ``group``, its leaves packed as ``layout``,
    each dtype cut into pipelined pieces of ``PIECE_BYTES``."""
    cols = tuple(max(1, PIECE_BYTES // d.itemsize) for d in layout.dtypes)
    return Routing(call.num_replicas, call.num_instances, group, layout.widths, cols)


def group_index(group: Group, num_replicas: int) -> dict[int, tuple[int, int]]:
    """Global replica -> (index of its group, its position in the group)."""
    out = {}
    for g, members in enumerate(groups_of(group, num_replicas)):
        for p, r in enumerate(members):
            out[r] = (g, p)
    return out


def _scratch_totals(items: tuple[Item, ...], instance: int, num_dtypes: int) -> list[int]:
    """Elements of scratch per dtype this instance needs for partials in flight."""
    totals = [0] * num_dtypes
    for it in items:
        for h, hop in enumerate(it.hops):
            if hop.instance != instance:
                continue
            last = h + 1 == len(it.hops)
            in_result = last and it.join < 0
            sent_from_input = h == 0 and len(hop.replicas) == 1 and not last
            if not (in_result or sent_from_input):
                totals[it.dtype] += it.col1 - it.col0
    return totals


def reduce_scatter_packed(
    call: Call,
    buffers: list[list[np.ndarray]],
    layout: Layout,
    op: Operator,
    method: str,
    group: Group,
    transport: Transport | None,
    deadline: float,
    what: str,
) -> list[list[np.ndarray]]:
    """Reduce-scatter ``(G, S)`` buffers (per local replica, per dtype) into one row of
    ``S`` elements per local replica and dtype: the replica's own shard."""
    offset = call.instance * call.local
    items = reduce_scatter_items(routing_of(call, group, layout), method)
    groups = groups_of(group, call.num_replicas)
    results = [
        [POOL.empty((w,), d) for d, w in zip(layout.dtypes, layout.widths, strict=True)]
        for _ in buffers
    ]
    arena = Arena(layout.dtypes, _scratch_totals(items, call.instance, len(layout.dtypes)))
    done: set[int] = set()
    joins: dict[int, np.ndarray] = {}

    def target(i: int) -> np.ndarray:
        it = items[i]
        owner = groups[it.group][it.position] - offset
        return results[owner][it.dtype][it.col0 : it.col1]

    def chunk(r: int, i: int) -> np.ndarray:
        it = items[i]
        return buffers[r - offset][it.dtype][it.position, it.col0 : it.col1]

    def step(i: int, h: int, piece: np.ndarray | None) -> np.ndarray:
        it = items[i]
        replicas = it.hops[h].replicas
        last = h + 1 == len(it.hops)
        if piece is None:
            if len(replicas) == 1 and not last:
                return chunk(replicas[0], i)  # sent straight from the input, no copy
            piece = target(i) if last and it.join < 0 else arena.take(it.col1 - it.col0, it.dtype)
            np.copyto(piece, chunk(replicas[0], i))
            replicas = replicas[1:]
        for r in replicas:
            combine_into(op, piece, chunk(r, i))
        return piece

    def recv_buffer(i: int, h: int) -> np.ndarray:
        it = items[i]
        if h + 1 == len(it.hops) and it.join < 0:
            return target(i)
        return arena.take(it.col1 - it.col0, it.dtype)

    def finish(i: int, piece: np.ndarray) -> None:
        it = items[i]
        if it.join < 0:
            done.add(i)
            partner = joins.pop(i, None)
            if partner is not None:
                combine_into(op, piece, partner)
        elif it.join in done:
            combine_into(op, target(it.join), piece)
        else:
            joins[it.join] = piece

    run_items(transport, items, call.instance, step, recv_buffer, finish, deadline, what)
    if op is Operator.MEAN:
        for row in results:
            for arr in row:
                finish_mean(op, arr, layout.group_size)
    return results


def prepare(
    values: Sequence[object],
    what: str,
    arg: str,
    options: str,
    op: Operator,
    group: Group,
    comm: MPI.Comm | None,
    timeout: float | None,
) -> tuple[Call, Layout, Transport | None, float]:
    """Validate a reducing collective's call.

    Returns:
        The validated call, its packing for the group size, the transport (None when this
        is the only instance) and the deadline.
    """
    transport = transport_for(comm)
    deadline = deadline_of(timeout)
    single = transport.size == 1
    call = validate(values, None if single else transport, what, options, deadline, arg)
    for k, leaf in enumerate(call.leaves[0]):
        check_dtype(op, leaf.dtype, f"leaf {k} of `{arg}`")
    size = group.size(call.num_replicas)
    shapes = [(leaf.shape, leaf.dtype) for leaf in call.leaves[0]]
    layout = layout_of(shapes, size)
    return call, layout, None if single else transport, deadline


def reduce_scatter(
    values: Sequence[object],
    op: str | Operator = "add",
    *,
    method: str = "auto",
    group: Group | None = None,
    comm: MPI.Comm | None = None,
    timeout: float | None = None,
) -> list:
    """Reduce over each group and give every replica its shard of the result.

    Args:
        values: one pytree of arrays per local replica (entry k is global replica
            ``instance * L + k``).
        op: "add", "mean", "max", "min" or "mul" (or a :class:`gcl.Operator`).
        method: a GCL ring method or "auto" (see ``gcl.resolve_method``).
        group: ``gcl.All()`` (None), ``gcl.Consecutive(k)`` or ``gcl.Orthogonal(k)``.
        comm: mpi4py communicator of the instances; None = a private duplicate of
            COMM_WORLD.
        timeout: seconds to wait for peers before raising ``gcl.CollectiveTimeout``.

    Returns:
        Per local replica, a pytree like its value whose every leaf is a 1-D array of
        ``ceil(leaf.size / G)`` elements: shard ``p`` (the replica's position in its group)
        of the reduced leaf, zero-padded at the end.
    """
    started = time.perf_counter()
    scattered = reduce_scatter_replicas(values, "reduce_scatter", op, method, group, comm, timeout)
    call, layout, rows, mine = scattered.call, scattered.layout, scattered.rows, scattered.mine
    out = [unflatten(call.treedef, unpack_rows(r, layout)) for r in rows[mine]]
    record("reduce_scatter", scattered.method, scattered.group, scattered.nbytes, started=started)
    return out


class Scattered(NamedTuple):
    """What a reduce-scatter leaves behind for the caller (all_reduce gathers it back)."""

    call: Call
    layout: Layout
    group: Group
    transport: Transport | None
    deadline: float
    rows: list  # per replica of the (possibly gathered) call: its reduced shard rows
    mine: slice  # which of ``rows`` belong to this instance's replicas
    method: str  # the method that ran (``auto`` resolved)
    nbytes: int  # bytes of one replica's input


def reduce_scatter_replicas(
    values: Sequence[object],
    what: str,
    op: str | Operator,
    method: str,
    group: Group | None,
    comm: MPI.Comm | None,
    timeout: float | None,
) -> Scattered:
    """Validates a call, then ring reduce-scatters it: the first half of an all-reduce too."""
    op = as_operator(op)
    group = as_group(group)
    method = as_method(method)
    options = f"op={op.value}, method={method}, group={group}"
    call, layout, transport, deadline = prepare(
        values, what, "values", options, op, group, comm, timeout
    )
    nbytes = sum(leaf.nbytes for leaf in call.leaves[0])
    method = collective_method(what, nbytes, layout.group_size, method)
    call, transport, mine = gather_if_small(call, transport, deadline, what)
    buffers = [pack(leaves, layout) for leaves in call.leaves]
    rows = reduce_scatter_packed(
        call, buffers, layout, op, method, group, transport, deadline, what
    )
    return Scattered(call, layout, group, transport, deadline, rows, mine, method, nbytes)
