"""Reusable large buffers: fresh multi-MiB allocations cost more than the collective.

Touching a freshly mapped 64 MiB array page-faults it in, which measured 20-300 ms here
(worse under MPI and load) against about 6 ms to rewrite a warm one. A buffer is reused
only when nothing else references it, which CPython's reference count tells exactly: any
live view of it (a result leaf the caller still holds, a jax array aliasing it) keeps it
out of reuse, so no caller can ever observe a buffer being overwritten.
"""

from __future__ import annotations

import math
import sys

import numpy as np

# Small arrays are cheap to allocate; pooling them would only pin memory.
MIN_POOLED_BYTES = 1 << 16
MAX_PER_KEY = 4


class BufferPool:
    """Uninitialised arrays of a given shape and dtype, recycled once unreferenced."""

    def __init__(self) -> None:
        self._free: dict[tuple[tuple[int, ...], str], list[np.ndarray]] = {}

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous array, reused when a pooled one is unreferenced."""
        dtype = np.dtype(dtype)
        if math.prod(shape) * dtype.itemsize < MIN_POOLED_BYTES:
            return np.empty(shape, dtype)
        key = (tuple(shape), dtype.str)
        bucket = self._free.setdefault(key, [])
        for buf in bucket:
            if sys.getrefcount(buf) <= _UNREFERENCED:
                return buf
        buf = np.empty(shape, dtype)
        if len(bucket) < MAX_PER_KEY:
            bucket.append(buf)
        return buf

    def clear(self) -> None:
        """Drop every pooled buffer (their memory is freed once unreferenced)."""
        self._free.clear()


class Arena:
    """Consecutive slices of one pooled 1-D scratch buffer per dtype, for a single call."""

    def __init__(self, dtypes: tuple[np.dtype, ...], totals: list[int]) -> None:
        self._bufs = [POOL.empty((t,), d) for d, t in zip(dtypes, totals, strict=True)]
        self._used = [0] * len(totals)

    def take(self, count: int, dtype_index: int) -> np.ndarray:
        """The next ``count`` unused elements of the dtype's scratch."""
        start = self._used[dtype_index]
        self._used[dtype_index] = start + count
        return self._bufs[dtype_index][start : start + count]


def _unreferenced_count() -> int:
    """getrefcount of a pooled buffer nobody else holds, seen from BufferPool.empty's loop
    (the bucket, the loop variable, the call's argument), measured on this interpreter."""
    bucket = [np.empty(1)]
    for buf in bucket:
        return sys.getrefcount(buf)
    raise AssertionError


_UNREFERENCED = _unreferenced_count()
POOL = BufferPool()
