"""A plain NumPy statement of what the gcl collectives compute, element by element.

Written from the documented reduction order (gcl._routes docstring), independently of the
implementation's routes and transport: every chunk of a group's padded ``(G, S)`` buffer is
folded over the members in the method's order. Shared by the in-process tests and the MPI
worker (which draws the same seeded cases on every rank).
"""

from __future__ import annotations

import math

import numpy as np

import gcl

OPS = ("add", "mean", "max", "min", "mul")
try:  # bfloat16 comes with JAX (ml_dtypes) but is optional for gcl
    import ml_dtypes

    BFLOAT16 = [ml_dtypes.bfloat16]
except ImportError:  # pragma: no cover
    BFLOAT16 = []
_KERNEL = {"add": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum, "mul": np.multiply}


def groups(group: object, num_replicas: int) -> list[list[int]]:
    """Members of each group in ring order, by the GCL/PopART definitions."""
    if isinstance(group, gcl.Consecutive):
        return [list(range(s, s + group.k)) for s in range(0, num_replicas, group.k)]
    if isinstance(group, gcl.Orthogonal):
        stride = num_replicas // group.k
        return [list(range(s, num_replicas, stride)) for s in range(stride)]
    return [list(range(num_replicas))]


def _orders(method: str, size: int, p: int) -> tuple[list[int], list[int]]:
    cw = [(p + i) % size for i in range(1, size)] + [p]
    acw = [(p - i) % size for i in range(1, size)] + [p]
    if method == "clockwise_ring":
        return cw, []
    if method == "anticlockwise_ring":
        return acw, []
    a = size - 1 - (size - 1) // 2
    return [*cw[:a], p], [(p - i) % size for i in range(1, size - a)]


def _fold(op: str, rows: list[np.ndarray]) -> np.ndarray:
    acc = rows[0].copy()
    for r in rows[1:]:
        acc = _KERNEL[op](acc, r)
    return acc


def _pack(leaves: list[np.ndarray], size: int) -> dict[np.dtype, np.ndarray]:
    """Per dtype: row p = every leaf's padded shard p, concatenated in leaf order."""
    by_dtype: dict[np.dtype, list[np.ndarray]] = {}
    for leaf in leaves:
        shard = math.ceil(leaf.size / size)
        padded = np.zeros(size * shard, leaf.dtype)
        padded[: leaf.size] = leaf.reshape(-1)
        by_dtype.setdefault(leaf.dtype, []).append(padded.reshape(size, shard))
    return {k: np.concatenate(v, axis=1) for k, v in by_dtype.items()}


def _unpack_rows(
    rows: dict[np.dtype, np.ndarray], like: list[np.ndarray], size: int
) -> list[np.ndarray]:
    """Per leaf, its shard columns from one packed row (or (G, S) buffer) per dtype."""
    offsets: dict[np.dtype, int] = {}
    out = []
    for leaf in like:
        shard = math.ceil(leaf.size / size)
        off = offsets.get(leaf.dtype, 0)
        offsets[leaf.dtype] = off + shard
        out.append(rows[leaf.dtype][..., off : off + shard])
    return out


def reduce_scatter(values: list[list[np.ndarray]], op: str, method: str, group: object) -> list:
    """Per global replica, per leaf: its 1-D shard of the group's reduction."""
    num = len(values)
    out: list = [None] * num
    for members in groups(group, num):
        size = len(members)
        packed = [_pack(values[m], size) for m in members]
        for p, m in enumerate(members):
            rows = {}
            for key in packed[0]:
                width = packed[0][key].shape[1]
                cols = []
                bounds = [(0, width, method)]
                if method == "bidirectional_ring_pair":
                    half = (width + 1) // 2
                    bounds = [(0, half, "clockwise_ring"), (half, width, "anticlockwise_ring")]
                for c0, c1, meth in bounds:
                    first, second = _orders(meth, size, p)
                    acc = _fold(op, [packed[q][key][p, c0:c1] for q in first])
                    if second:
                        acc = _KERNEL[op](
                            acc, _fold(op, [packed[q][key][p, c0:c1] for q in second])
                        )
                    cols.append(acc)
                row = np.concatenate(cols) if cols else np.zeros(0, key)
                if op == "mean" and size > 1:
                    row = np.divide(row, np.asarray(size, row.dtype))
                rows[key] = row.astype(key)
            out[m] = _unpack_rows(rows, values[m], size)
    return out


def all_reduce(values: list[list[np.ndarray]], op: str, method: str, group: object) -> list:
    """Per global replica, per leaf: the full reduction over its group."""
    shards = reduce_scatter(values, op, method, group)
    num = len(values)
    out: list = [None] * num
    for members in groups(group, num):
        for m in members:
            full = []
            for k, leaf in enumerate(values[m]):
                flat = np.concatenate([shards[q][k] for q in members])
                full.append(flat[: leaf.size].reshape(leaf.shape))
            out[m] = full
    return out


def broadcast(values: list[list[np.ndarray]], root: int, group: object) -> list:
    """Per global replica, per leaf: the group root's leaf."""
    out: list = [None] * len(values)
    for members in groups(group, len(values)):
        for m in members:
            out[m] = values[members[root]]
    return out


def draw_case(rng: np.random.Generator, num_replicas: int) -> dict:
    """A random collective call: op, method, group, dtypes, shapes (empty and 1-element
    leaves included) and per-replica values, the same on every rank for one seed."""
    divisors = [d for d in range(1, num_replicas + 1) if num_replicas % d == 0]
    kind = rng.integers(3)
    k = int(rng.choice(divisors))
    group = [gcl.All(), gcl.Consecutive(k), gcl.Orthogonal(k)][kind]
    dtypes = [np.float32, np.float64, np.float16, *BFLOAT16]
    shapes = [(), (0,), (1,), (7,), (3, 5), (2, 0), (13,), (4, 4, 3)]
    num_leaves = int(rng.integers(1, 4))
    spec = [
        (shapes[int(rng.integers(len(shapes)))], dtypes[int(rng.integers(len(dtypes)))])
        for _ in range(num_leaves)
    ]
    values = [
        [rng.standard_normal(shape).astype(dtype) for shape, dtype in spec]
        for _ in range(num_replicas)
    ]
    return {
        "op": OPS[int(rng.integers(len(OPS)))],
        "method": gcl.METHODS[int(rng.integers(len(gcl.METHODS)))],
        "group": group,
        "root": int(rng.integers(group.size(num_replicas))),
        "values": values,
    }
