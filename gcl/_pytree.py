"""Pytrees of arrays <-> one padded ``(G, S)`` buffer per dtype.

A tiny own flattening (dict, list, tuple, NamedTuple, None) keeps ``gcl`` free of JAX for
NumPy callers; jax arrays (and anything with ``__array__``) are leaves read through
``np.asarray``, which does not copy a CPU jax array. Other registered JAX pytrees fall
back to ``jax.tree_util`` when JAX is already imported.

Each leaf of ``n`` elements is padded with zeros to ``G * ceil(n / G)`` and split into
``G`` shards; row ``p`` of a dtype's buffer is the concatenation of every leaf's shard
``p``, so a ring chunk is one contiguous row and reduce-scatter's output for position
``p`` is exactly RTS's shard layout.

References:
    graphcore/popart user guide, "Tensor locations": RTS shards have ceil(N/R) elements,
    zero-padded at the end.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple, TypeGuard

import numpy as np

from gcl._buffers import POOL


class TreeDef(NamedTuple):
    """The structure of a pytree, without its leaves; comparable and printable."""

    kind: str  # "leaf", "none", "dict", "list", "tuple", "namedtuple", "jax"
    meta: Any  # dict keys, namedtuple class, or jax treedef
    children: tuple[TreeDef, ...]

    def describe(self) -> str:
        """A deterministic text form, equal across processes for equal structures."""
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ",".join(c.describe() for c in self.children)
        if self.kind == "dict":
            return (
                "{"
                + ",".join(
                    f"{k!r}:{c.describe()}" for k, c in zip(self.meta, self.children, strict=True)
                )
                + "}"
            )
        if self.kind == "list":
            return f"[{inner}]"
        if self.kind == "tuple":
            return f"({inner})"
        if self.kind == "namedtuple":
            return f"{self.meta.__name__}({inner})"
        return str(self.meta)


def _is_namedtuple(x: object) -> TypeGuard[tuple[object, ...]]:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _as_leaf(x: object) -> np.ndarray:
    return np.asarray(x)


def _walk(x: object, leaves: list[np.ndarray]) -> TreeDef:
    if x is None:
        return TreeDef("none", None, ())
    if isinstance(x, dict):
        keys = tuple(sorted(x))
        return TreeDef("dict", keys, tuple(_walk(x[k], leaves) for k in keys))
    if _is_namedtuple(x):
        return TreeDef("namedtuple", type(x), tuple(_walk(c, leaves) for c in x))
    if isinstance(x, tuple):
        return TreeDef("tuple", None, tuple(_walk(c, leaves) for c in x))
    if isinstance(x, list):
        return TreeDef("list", None, tuple(_walk(c, leaves) for c in x))
    is_array_like = isinstance(x, np.ndarray | np.generic | int | float | complex | bool)
    if not (is_array_like or hasattr(x, "__array__")) and "jax" in sys.modules:
        import jax

        sub, treedef = jax.tree_util.tree_flatten(x)
        return TreeDef("jax", treedef, tuple(_walk(c, leaves) for c in sub))
    leaves.append(_as_leaf(x))
    return TreeDef("leaf", None, ())


def flatten(tree: object) -> tuple[list[np.ndarray], TreeDef]:
    """Leaves (as numpy arrays, in a deterministic order) and the structure of ``tree``."""
    # Module-level recursion, not a recursive closure: a closure that refers to itself is a
    # reference cycle that would keep the leaves (and pooled buffers) alive until gc runs.
    leaves: list[np.ndarray] = []
    treedef = _walk(tree, leaves)
    return leaves, treedef


def _build(t: TreeDef, it: Iterator[np.ndarray]) -> Any:
    if t.kind == "leaf":
        return next(it)
    if t.kind == "none":
        return None
    children = [_build(c, it) for c in t.children]
    if t.kind == "dict":
        return dict(zip(t.meta, children, strict=True))
    if t.kind == "list":
        return children
    if t.kind == "tuple":
        return tuple(children)
    if t.kind == "namedtuple":
        return t.meta(*children)
    return t.meta.unflatten(children)


def unflatten(treedef: TreeDef, leaves: list[np.ndarray]) -> Any:
    """Rebuild a tree of ``treedef``'s structure from ``leaves`` (in flatten order)."""
    return _build(treedef, iter(leaves))


class LeafSlot(NamedTuple):
    """Where one leaf lives in its dtype's ``(G, S)`` buffer."""

    dtype_index: int  # index into Layout.dtypes
    offset: int  # first column of this leaf's shard in every row
    shard: int  # ceil(size / G) columns
    shape: tuple[int, ...]
    size: int


class Layout(NamedTuple):
    """How a list of leaves maps onto one ``(G, S)`` buffer per dtype."""

    group_size: int
    dtypes: tuple[np.dtype, ...]
    widths: tuple[int, ...]  # S per dtype
    slots: tuple[LeafSlot, ...]


def layout_of(shapes_dtypes: list[tuple[tuple[int, ...], np.dtype]], group_size: int) -> Layout:
    """The packing of leaves with these shapes and dtypes for a group of ``group_size``."""
    dtypes: list[np.dtype] = []
    widths: list[int] = []
    slots = []
    for shape, dtype in shapes_dtypes:
        dtype = np.dtype(dtype)
        if dtype not in dtypes:
            dtypes.append(dtype)
            widths.append(0)
        d = dtypes.index(dtype)
        size = math.prod(shape)
        shard = -(-size // group_size)
        slots.append(LeafSlot(d, widths[d], shard, tuple(shape), size))
        widths[d] += shard
    return Layout(group_size, tuple(dtypes), tuple(widths), tuple(slots))


def pack(leaves: list[np.ndarray], layout: Layout) -> list[np.ndarray]:
    """One ``(G, S)`` buffer per dtype; a view of the leaf (no copy) when it alone fills it."""
    g = layout.group_size
    views: list[np.ndarray | None] = [None] * len(layout.dtypes)
    counts = [0] * len(layout.dtypes)
    for slot in layout.slots:
        counts[slot.dtype_index] += 1
    viewed = set()
    for leaf, slot in zip(leaves, layout.slots, strict=True):
        d = slot.dtype_index
        if counts[d] == 1 and slot.size == g * slot.shard and leaf.flags.c_contiguous:
            views[d] = leaf.reshape(g, slot.shard)
            viewed.add(d)
    bufs: list[np.ndarray] = []
    for d, (dtype, width) in enumerate(zip(layout.dtypes, layout.widths, strict=True)):
        view = views[d]
        bufs.append(view if view is not None else POOL.empty((g, width), dtype))
    for leaf, slot in zip(leaves, layout.slots, strict=True):
        buf = bufs[slot.dtype_index]
        if slot.dtype_index in viewed or slot.shard == 0:
            continue
        cols = buf[:, slot.offset : slot.offset + slot.shard]
        flat = leaf.reshape(-1)
        full, rest = divmod(slot.size, slot.shard)
        cols[:full] = flat[: full * slot.shard].reshape(full, slot.shard)
        if full < g:
            cols[full, :rest] = flat[full * slot.shard :]
            cols[full, rest:] = 0
            cols[full + 1 :] = 0
    return bufs


def pack_rows(leaves: list[np.ndarray], layout: Layout) -> list[np.ndarray]:
    """One 1-D row of ``S`` elements per dtype from per-leaf shards (``all_gather``'s input)."""
    out: list[np.ndarray] = []
    counts = [0] * len(layout.dtypes)
    for slot in layout.slots:
        counts[slot.dtype_index] += 1
    for d, (dtype, width) in enumerate(zip(layout.dtypes, layout.widths, strict=True)):
        only = [i for i, s in enumerate(layout.slots) if s.dtype_index == d]
        if counts[d] == 1 and leaves[only[0]].flags.c_contiguous:
            out.append(leaves[only[0]].reshape(-1))
            continue
        row = POOL.empty((width,), dtype)
        for i in only:
            slot = layout.slots[i]
            row[slot.offset : slot.offset + slot.shard] = leaves[i].reshape(-1)
        out.append(row)
    return out


def unpack(buffers: list[np.ndarray], layout: Layout) -> list[np.ndarray]:
    """Full leaves from ``(G, S)`` buffers, dropping the padding (views where possible)."""
    leaves = []
    for slot in layout.slots:
        buf = buffers[slot.dtype_index]
        cols = buf[:, slot.offset : slot.offset + slot.shard]
        leaves.append(cols.reshape(-1)[: slot.size].reshape(slot.shape))
    return leaves


def unpack_rows(rows: list[np.ndarray], layout: Layout) -> list[np.ndarray]:
    """Per-leaf shards (1-D, ``ceil(size / G)`` elements) from one row per dtype (views)."""
    return [rows[s.dtype_index][s.offset : s.offset + s.shard] for s in layout.slots]
