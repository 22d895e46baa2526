"""All-gather: rebuild full leaves from every group member's shard (pure copies).

The inverse of :func:`gcl.reduce_scatter`: ``all_gather(reduce_scatter(x), like=x[0])``
equals ``all_reduce(x)`` bit for bit, as RTS relies on.

References:
    GCL User Guide, "Collective operations" (AllGather); graphcore/popart user guide,
    "Tensor locations" (RTS: AllGather rebuilds the full tensor from the shards).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np
import numpy.typing as npt

from gcl._buffers import POOL
from gcl._dataflow import run_items
from gcl._gathered import gather_if_small
from gcl._groups import Group, as_group, groups_of
from gcl._pytree import Layout, TreeDef, flatten, layout_of, pack_rows, unflatten, unpack
from gcl._recording import record
from gcl._reduce_scatter import group_index, routing_of
from gcl._routes import Item, all_gather_items, collective_method
from gcl._transport import Transport, deadline_of, transport_for
from gcl._validation import Call, validate

if TYPE_CHECKING:
    from mpi4py import MPI


def all_gather_packed(
    call: Call,
    rows: list[list[np.ndarray]],
    layout: Layout,
    group: Group,
    transport: Transport | None,
    deadline: float,
    what: str,
) -> dict[int, list[np.ndarray]]:
    """Gather one row of ``S`` elements per local replica and dtype into one ``(G, S)``
    buffer per dtype for every group with a member on this instance."""
    offset = call.instance * call.local
    items = all_gather_items(routing_of(call, group, layout))
    groups = groups_of(group, call.num_replicas)
    out = {
        g: [
            POOL.empty((layout.group_size, w), d)
            for d, w in zip(layout.dtypes, layout.widths, strict=True)
        ]
        for g in local_groups(call, group)
    }

    def source(it: Item) -> np.ndarray:
        owner = groups[it.group][it.position] - offset
        return rows[owner][it.dtype][it.col0 : it.col1]

    run_copy_items(transport, items, call, out, lambda it: it.position, source, deadline, what)
    return out


def local_groups(call: Call, group: Group) -> list[int]:
    """The groups with at least one member among this instance's replicas, in order."""
    offset = call.instance * call.local
    index = group_index(group, call.num_replicas)
    return sorted({index[offset + k][0] for k in range(call.local)})


def run_copy_items(
    transport: Transport | None,
    items: Sequence[Item],
    call: Call,
    out: dict[int, list[np.ndarray]],
    row_of: Callable[[Item], int],
    source: Callable[[Item], np.ndarray],
    deadline: float,
    what: str,
) -> None:
    """Runs a copy-only dataflow (all-gather, broadcast): item ``it`` lands in row
    ``row_of(it)`` of ``out[it.group][it.dtype]``, either received into place or, where this
    instance starts its route, copied from ``source(it)``."""

    def dest(i: int) -> np.ndarray:
        it = items[i]
        return out[it.group][it.dtype][row_of(it), it.col0 : it.col1]

    def step(i: int, h: int, piece: np.ndarray | None) -> np.ndarray:
        if piece is None:
            piece = dest(i)
            np.copyto(piece, source(items[i]))
        return piece

    run_items(
        transport,
        items,
        call.instance,
        step,
        lambda i, h: dest(i),
        lambda i, p: None,
        deadline,
        what,
    )


class _ShapeDtype(Protocol):
    """What ``like`` may give instead of an array (``jax.ShapeDtypeStruct``)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> npt.DTypeLike: ...


def _like_shapes(like: object) -> tuple[list[tuple[tuple[int, ...], np.dtype]], TreeDef]:
    specs, treedef = flatten(_map_specs(like))
    return [(tuple(s.shape), s.dtype) for s in specs], treedef


def _map_specs(like: object) -> object:
    """Replace ShapeDtypeStruct-like leaves by zero-stride arrays (no memory) for flattening."""
    if isinstance(like, dict):
        return {k: _map_specs(v) for k, v in like.items()}
    if isinstance(like, tuple) and hasattr(type(like), "_fields"):
        make = cast("Callable[..., object]", type(like))  # a NamedTuple: fields by position
        return make(*(_map_specs(v) for v in like))
    if isinstance(like, list | tuple):
        return type(like)(_map_specs(v) for v in like)
    if hasattr(like, "shape") and hasattr(like, "dtype") and not hasattr(like, "__array__"):
        spec = cast("_ShapeDtype", like)
        return np.broadcast_to(np.zeros((), np.dtype(spec.dtype)), tuple(spec.shape))
    return like


def all_gather(
    shards: Sequence[object],
    *,
    like: object,
    group: Group | None = None,
    comm: MPI.Comm | None = None,
    timeout: float | None = None,
) -> list:
    """Rebuild full leaves from the shards of every member of each group.

    Args:
        shards: per local replica, a pytree (structured like ``like``) whose leaves are 1-D
            shards of ``ceil(size / G)`` elements, as :func:`gcl.reduce_scatter` returns.
        like: a pytree of arrays or ``jax.ShapeDtypeStruct`` giving the full shapes and
            dtypes.
        group: ``gcl.All()`` (None), ``gcl.Consecutive(k)`` or ``gcl.Orthogonal(k)``.
        comm: mpi4py communicator of the instances; None = a private duplicate of
            COMM_WORLD.
        timeout: seconds to wait for peers before raising ``gcl.CollectiveTimeout``.

    Returns:
        Per local replica, a pytree like ``like`` with the full leaves (padding dropped).
        Replicas of one group share the same read-only arrays.
    """
    started = time.perf_counter()
    group = as_group(group)
    transport = transport_for(comm)
    deadline = deadline_of(timeout)
    single = transport.size == 1
    like_specs, like_tree = _like_shapes(like)
    like_text = ", ".join(f"{d.name}{list(shape)}" for shape, d in like_specs)
    call = validate(
        shards,
        None if single else transport,
        "all_gather",
        f"group={group}, like=[{like_text}]",
        deadline,
        "shards",
    )
    size = group.size(call.num_replicas)
    layout = layout_of(like_specs, size)
    expected = [(s.shard,) for s in layout.slots]
    got = [leaf.shape for leaf in call.leaves[0]]
    dtypes_ok = len(got) == len(expected) and all(
        leaf.dtype == d for leaf, (_, d) in zip(call.leaves[0], like_specs, strict=True)
    )
    same_tree = call.treedef.describe() == like_tree.describe()
    if got != expected or not dtypes_ok or not same_tree:
        raise ValueError(
            f"gcl.all_gather: `shards` of each replica must be 1-D shards of ceil(size / {size}) "
            f"elements of `like`'s dtypes, expected shapes {expected} and dtypes "
            f"{[d.name for _, d in like_specs]}, got shapes {got} and dtypes "
            f"{[leaf.dtype.name for leaf in call.leaves[0]]}; pass the output of "
            f"gcl.reduce_scatter with the same group."
        )
    call, messaging, mine = gather_if_small(
        call, None if single else transport, deadline, "all_gather"
    )
    rows = [pack_rows(leaves, layout) for leaves in call.leaves]
    out = all_gather_packed(call, rows, layout, group, messaging, deadline, "all_gather")
    result = finish_replicas(call, out, layout, group, like_tree)[mine]
    gathered = sum(math.prod(shape) * np.dtype(d).itemsize for shape, d in like_specs)
    record("all_gather", collective_method("all_gather", 0, size), group, gathered, started=started)
    return result


def finish_replicas(call: Call, out: dict, layout: Layout, group: Group, treedef: TreeDef) -> list:
    """Per local replica, its group's full leaves as a read-only pytree (shared per group)."""
    index = group_index(group, call.num_replicas)
    trees = {}
    for g, buffers in out.items():
        leaves = unpack(buffers, layout)
        for leaf in leaves:
            leaf.flags.writeable = False
        trees[g] = unflatten(treedef, leaves)
    offset = call.instance * call.local
    return [trees[index[offset + k][0]] for k in range(call.local)]
