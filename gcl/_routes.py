"""Ring schedules: the fixed path (and reduction order) of every chunk of a collective.

A route lists, hop by hop, the instance that handles a chunk and the global replicas whose
data it combines there, in order. Consecutive ring positions on one instance form one hop,
so an in-instance step is an in-memory operation and only instance changes are messages;
the sequence of replicas, hence the reduction order, depends only on global replica
indices, never on the layout. Routes are pure functions of the job's shape and cached.

Ring reduce-scatter over a group of ``G`` positions (chunk ``p`` is owned by position p):

- ``clockwise_ring``: chunk p accumulates ``x[p+1], x[p+2], ..., x[p]`` (indices mod G).
- ``anticlockwise_ring``: ``x[p-1], x[p-2], ..., x[p]``.
- ``bidirectional_ring_pair``: the first half of every chunk's columns goes clockwise, the
  second half anticlockwise.
- ``meet_in_middle_ring``: ``a = ceil((G-1)/2)`` hops clockwise ending with the owner's
  ``x[p]`` and ``G-1-a`` hops anticlockwise delivered to the owner, combined there as
  ``(x[p+1] + ... + x[p+a] + x[p]) + (x[p-1] + ... + x[p-(G-1-a)])``.

References:
    poplibs ``popops/Collectives.hpp`` (CollectiveMethod); GCL User Guide, "Methods"
    (https://docs.graphcore.ai/projects/gcl-user-guide/en/latest/methods.html);
    P. Patarasuk and X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 69(2), 2009 (ring reduce-scatter + all-gather).
"""

from __future__ import annotations

import functools
from typing import Literal, NamedTuple

from gcl._groups import Group, groups_of

Method = Literal[
    "clockwise_ring", "anticlockwise_ring", "bidirectional_ring_pair", "meet_in_middle_ring"
]
METHODS: tuple[str, ...] = (
    "clockwise_ring",
    "anticlockwise_ring",
    "bidirectional_ring_pair",
    "meet_in_middle_ring",
)
# Below this many bytes per replica, the shorter routes of meet_in_middle_ring win
# (latency-bound); above it, one direction with fewer, larger messages.
AUTO_SMALL_BYTES = 1 << 20


class Hop(NamedTuple):
    """One instance's part of a route: the replicas it combines, in order."""

    instance: int
    replicas: tuple[int, ...]


class Item(NamedTuple):
    """One piece of one chunk moving along one route."""

    group: int  # index into groups_of(...)
    position: int  # the owner's position in the group (the chunk index)
    dtype: int  # index into the packing's dtypes
    col0: int
    col1: int
    hops: tuple[Hop, ...]
    join: int  # -1: this item's final value is the result; else index of the item it joins


def as_method(method: str) -> str:
    """Validate a method name (``auto`` included)."""
    if method != "auto" and method not in METHODS:
        raise ValueError(
            f"`method` must be 'auto' or one of {', '.join(METHODS)}, got {method!r}; "
            f"pass e.g. method='clockwise_ring'."
        )
    return method


def resolve_method(method: str, bytes_per_replica: int, group_size: int) -> str:
    """``auto``: meet_in_middle_ring for small messages on groups of 3+, else clockwise_ring.

    Any choice is a function of message size and group only, so it is the same on every
    layout and keeps results bit-identical across layouts. This is the reducing collectives'
    rule (all-reduce, reduce-scatter); :func:`collective_method` covers every kind.
    """
    if method != "auto":
        return method
    if group_size > 2 and bytes_per_replica < AUTO_SMALL_BYTES:
        return "meet_in_middle_ring"
    return "clockwise_ring"


# The collectives whose method is a choice; all-gather and broadcast are pure copies that
# always travel clockwise through the group (``all_gather_items``, ``broadcast_items``).
REDUCING_KINDS = ("all_reduce", "reduce_scatter")
COPY_KINDS = ("all_gather", "broadcast")


def collective_method(
    kind: str, bytes_per_replica: int, group_size: int, method: str = "auto"
) -> str:
    """The GCL method gcl runs for a collective: what ``auto`` (or ``method``) resolves to.

    The one rule gcl itself follows, and what the runtime writes into the collective
    records the hardware model prices, so the simulated step prices exactly what ran.

    Args:
        kind: ``all_reduce``, ``reduce_scatter``, ``all_gather`` or ``broadcast``.
        bytes_per_replica: bytes of one replica's input (for ``all_gather``, its shard).
        group_size: replicas per group.
        method: the requested method; ``auto`` lets gcl choose.

    Returns:
        A method of ``METHODS``: for the reducing kinds :func:`resolve_method`, for the
        copies ``clockwise_ring``, the only route they take.
    """
    if kind in COPY_KINDS:
        return "clockwise_ring"
    if kind not in REDUCING_KINDS:
        raise ValueError(
            f"`kind` must be one of {REDUCING_KINDS + COPY_KINDS}, got {kind!r}; "
            f"pass e.g. kind='all_reduce'."
        )
    return resolve_method(as_method(method), bytes_per_replica, group_size)


class Routing(NamedTuple):
    """What a collective's items depend on: the job's replicas and instances, the groups,
    and each dtype's width and piece in columns (hashable: the item lists are cached on it).
    """

    num_replicas: int
    num_instances: int
    group: Group
    widths: tuple[int, ...]
    piece_cols: tuple[int, ...]


def _hops(members: tuple[int, ...], positions: list[int], local: int) -> list[Hop]:
    hops: list[Hop] = []
    for pos in positions:
        r = members[pos]
        inst = r // local
        if hops and hops[-1].instance == inst:
            hops[-1] = Hop(inst, (*hops[-1].replicas, r))
        else:
            hops.append(Hop(inst, (r,)))
    return hops


def _pieces(col0: int, col1: int, piece: int) -> list[tuple[int, int]]:
    return [(c, min(c + piece, col1)) for c in range(col0, col1, piece)]


@functools.lru_cache(maxsize=256)
def reduce_scatter_items(routing: Routing, method: str) -> tuple[Item, ...]:
    """Every item of a ring reduce-scatter, for all groups, dtypes and pieces."""
    local = routing.num_replicas // routing.num_instances
    items: list[Item] = []
    for g, members in enumerate(groups_of(routing.group, routing.num_replicas)):
        size = len(members)
        owner_inst = [m // local for m in members]
        for p in range(size):
            cw = [(p + i) % size for i in range(1, size)] + [p]
            acw = [(p - i) % size for i in range(1, size)] + [p]
            for d, width in enumerate(routing.widths):
                half = (width + 1) // 2
                # (first column, end column, route, route back to the owner or None)
                parts: list[tuple[int, int, list[int], list[int] | None]]
                if method == "clockwise_ring":
                    parts = [(0, width, cw, None)]
                elif method == "anticlockwise_ring":
                    parts = [(0, width, acw, None)]
                elif method == "bidirectional_ring_pair":
                    parts = [(0, half, cw, None), (half, width, acw, None)]
                else:
                    a = size - 1 - (size - 1) // 2
                    back = [(p - i) % size for i in range(1, size - a)]
                    parts = [(0, width, [*cw[:a], p], back or None)]
                for c0, c1, route, join_route in parts:
                    for q0, q1 in _pieces(c0, c1, routing.piece_cols[d]):
                        primary = len(items)
                        items.append(Item(g, p, d, q0, q1, tuple(_hops(members, route, local)), -1))
                        if join_route:
                            hops = _hops(members, join_route, local)
                            if hops[-1].instance != owner_inst[p]:
                                hops.append(Hop(owner_inst[p], ()))
                            items.append(Item(g, p, d, q0, q1, tuple(hops), primary))
    return tuple(items)


def _visit_order(members: tuple[int, ...], start: int, local: int) -> tuple[Hop, ...]:
    size = len(members)
    hops: list[Hop] = []
    seen: set[int] = set()
    for i in range(size):
        inst = members[(start + i) % size] // local
        if inst not in seen:
            seen.add(inst)
            hops.append(Hop(inst, ()))
    return tuple(hops)


def _copies(routing: Routing, root: int | None) -> tuple[Item, ...]:
    """Pure copies, pipelined by pieces: the data of position ``root`` of every group (of
    every position when None) travels clockwise from its instance to every other instance
    holding a member."""
    local = routing.num_replicas // routing.num_instances
    items = []
    for g, members in enumerate(groups_of(routing.group, routing.num_replicas)):
        for p in range(len(members)) if root is None else (root,):
            hops = _visit_order(members, p, local)
            for d, width in enumerate(routing.widths):
                for q0, q1 in _pieces(0, width, routing.piece_cols[d]):
                    items.append(Item(g, p, d, q0, q1, hops, -1))
    return tuple(items)


@functools.lru_cache(maxsize=256)
def all_gather_items(routing: Routing) -> tuple[Item, ...]:
    """Shard p of every group travels clockwise from its owner's instance to every other
    instance holding a member."""
    return _copies(routing, None)


@functools.lru_cache(maxsize=256)
def broadcast_items(routing: Routing, root: int) -> tuple[Item, ...]:
    """The root's data of every group travels clockwise through the group's instances."""
    return _copies(routing, root)
