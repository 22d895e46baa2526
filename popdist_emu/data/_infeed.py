"""The host-IO infeed: background workers prepare items ahead of the replicas that consume them.

A real pipeline, not a model of one: ``workers`` threads call ``produce(index)`` for the next
indices while the training loop consumes earlier ones, at most ``prefetch_depth`` items ahead.
Items come out in index order, each exactly once, whatever the worker count and whatever order
the workers finish in. An exception in a worker is raised in the consuming loop, naming the item
it came from; closing the infeed (explicitly, at the end of a ``with`` block, or when the loop
stops early or fails) stops the workers and joins them within a bound.

Threads suffice: NumPy and XLA release the GIL in heavy operations, so preparing the next batch
overlaps the current step's compute. ``produce`` is called concurrently from several threads when
``workers > 1`` and must be thread-safe (a pure function of the index is).

The optional data-size reduction pair (``compress`` on the host, ``decompress`` jitted on the
replica) shrinks what crosses the host link, e.g. float32 pixels sent as uint8 (4x fewer bytes).

References:
    Memory and Performance Optimisation on the IPU, section 4.4 "Host-IPU I/O optimisation":
    4.4.1 prefetch and prefetch depth (a depth of 3 is the suggested starting point), 4.4.2
    overlapping I/O with compute, 4.4.3 data size reduction (send uint8/float16, normalise on
    the IPU).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Generic, NamedTuple, TypeVar

import jax
import numpy as np

from hardware import DEFAULT_PREFETCH_DEPTH
from popdist_emu._trees import tree_nbytes

T = TypeVar("T")


class InfeedError(RuntimeError):
    """A worker failed to produce an item; ``index`` is the item (step) it was producing."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class InfeedStats(NamedTuple):
    """What the infeed did so far, for the host-IO cost model and reports.

    Attributes:
        items: items delivered to the consumer.
        bytes: host bytes of the delivered items (sum of array leaves' ``nbytes``).
        produce_seconds: worker time spent inside ``produce`` for the delivered items.
        wait_seconds: consumer time spent waiting for an item that was not ready: the host IO
            that prefetching did not hide.
        produce_cpu_seconds: CPU time of the worker threads inside ``produce`` for the
            delivered items (``time.thread_time``): the host's work, which an oversubscribed
            machine does not inflate as it does ``produce_seconds``.
        workers: the infeed's worker threads.
        first_cpu_seconds: ``produce_cpu_seconds`` of the first delivered item alone (it
            pays one-time costs: first calls, caches), so a short run can leave it out.
    """

    items: int
    bytes: int
    produce_seconds: float
    wait_seconds: float
    produce_cpu_seconds: float = 0.0
    workers: int = 1
    first_cpu_seconds: float = 0.0


class _Failure(NamedTuple):
    error: BaseException


class Infeed(Generic[T]):
    """An ordered, bounded-prefetch iterator over ``produce(start), produce(start + 1), ...``.

    Use it as a context manager (or call :meth:`close`) so its threads stop even when the loop
    ends early or raises::

        with Infeed(loader.batch_for_step, num_steps, prefetch_depth=3, workers=2) as feed:
            for step, batch in enumerate(feed):
                trainer.step(batch)

    Args:
        produce: ``index -> item``; called from worker threads, so it must be thread-safe.
        num_items: how many items to deliver, or None for an endless stream.
        prefetch_depth: how many items may be prepared ahead of the one being consumed (claimed
            by a worker but not yet delivered); 1 means no overlap beyond the next item.
        workers: worker threads; more than ``prefetch_depth`` would idle.
        start: the first index (e.g. the step a resumed run starts from).
        join_timeout: seconds :meth:`close` waits for each worker; a worker stuck inside
            ``produce`` longer than this is left as a daemon thread and reported by
            :attr:`alive_workers`.
        name: thread-name prefix, shown in debuggers and thread dumps.
    """

    def __init__(
        self,
        produce: Callable[[int], T],
        num_items: int | None,
        *,
        prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
        workers: int = 1,
        start: int = 0,
        join_timeout: float = 10.0,
        name: str = "infeed",
    ) -> None:
        if not callable(produce):
            raise TypeError(f"Infeed: `produce` must be callable (index -> item), got {produce!r}.")
        if num_items is not None and (not isinstance(num_items, int) or num_items < 0):
            raise ValueError(
                f"Infeed: `num_items` must be a non-negative int or None (endless), got "
                f"{num_items!r}."
            )
        if not isinstance(prefetch_depth, int) or prefetch_depth < 1:
            raise ValueError(
                f"Infeed: `prefetch_depth` must be an int >= 1, got {prefetch_depth!r}; use 1 "
                f"for no prefetch beyond the next item, {DEFAULT_PREFETCH_DEPTH} is the default."
            )
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"Infeed: `workers` must be an int >= 1, got {workers!r}.")
        self._produce = produce
        self._end = None if num_items is None else start + num_items
        self._depth = prefetch_depth
        self._join_timeout = join_timeout
        self._cond = threading.Condition()
        self._next_claim = start  # next index a worker will take
        self._next_deliver = start  # next index the consumer gets
        # index -> (item or _Failure, seconds, CPU seconds)
        self._ready: dict[int, tuple[T | _Failure, float, float]] = {}
        self._stopping = False
        self._failed = False
        self._closed = False
        self._items = 0
        self._bytes = 0
        self._produce_seconds = 0.0
        self._produce_cpu_seconds = 0.0
        self._first_cpu_seconds = 0.0
        self._wait_seconds = 0.0
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    # -- workers -------------------------------------------------------------------------
    def _claim(self) -> int | None:
        """The next index to produce, or None when the worker should exit."""
        with self._cond:
            while True:
                if self._stopping or self._failed:
                    return None
                if self._end is not None and self._next_claim >= self._end:
                    return None
                if self._next_claim - self._next_deliver < self._depth:
                    index = self._next_claim
                    self._next_claim += 1
                    return index
                self._cond.wait()

    def _work(self) -> None:
        while (index := self._claim()) is not None:
            began, cpu = time.perf_counter(), time.thread_time()
            try:
                result: T | _Failure = self._produce(index)
            except BaseException as error:  # handed to the consumer, never lost
                result = _Failure(error)
            seconds = time.perf_counter() - began
            cpu_seconds = time.thread_time() - cpu
            with self._cond:
                self._ready[index] = (result, seconds, cpu_seconds)
                if isinstance(result, _Failure):
                    # Stop claiming new items; the consumer raises when it reaches this index.
                    self._failed = True
                self._cond.notify_all()

    # -- consumer ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        with self._cond:
            if self._closed:
                raise StopIteration
            if self._end is not None and self._next_deliver >= self._end:
                self._closed_by_consumer()
                raise StopIteration
            index = self._next_deliver
            began = time.perf_counter()
            while index not in self._ready:
                if not any(t.is_alive() for t in self._threads):
                    raise RuntimeError(
                        f"Infeed: item {index} will never arrive: every worker has exited; "
                        f"this is a bug in the infeed, please report it."
                    )
                self._cond.wait(timeout=0.5)
            self._wait_seconds += time.perf_counter() - began
            result, seconds, cpu_seconds = self._ready.pop(index)
            self._next_deliver += 1
            self._cond.notify_all()
        if isinstance(result, _Failure):
            self.close()
            raise InfeedError(
                f"Infeed: producing item {index} (step {index}) failed in a worker thread: "
                f"{type(result.error).__name__}: {result.error}",
                index,
            ) from result.error
        self._items += 1
        self._bytes += tree_nbytes(result)
        self._produce_seconds += seconds
        self._produce_cpu_seconds += cpu_seconds
        if self._items == 1:
            self._first_cpu_seconds = cpu_seconds
        return result

    def _closed_by_consumer(self) -> None:
        # Called with the lock held when the last item was delivered: nothing left to produce.
        self._stopping = True
        self._cond.notify_all()

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Stops the workers, drops prepared items and joins the threads (bounded wait).

        Safe to call more than once and from ``__exit__`` after an exception.
        """
        with self._cond:
            self._stopping = True
            self._closed = True
            self._ready.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + self._join_timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> Infeed[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A forgotten infeed must not keep workers waiting forever; no join here (GC context).
        try:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
        except Exception:  # interpreter shutdown may have torn down threading
            pass

    @property
    def alive_workers(self) -> int:
        """Worker threads still running (0 after a clean :meth:`close`)."""
        return sum(t.is_alive() for t in self._threads)

    @property
    def prefetch_depth(self) -> int:
        """Items that may be prepared ahead of the one being consumed."""
        return self._depth

    @property
    def stats(self) -> InfeedStats:
        """Items and bytes delivered, worker time and the consumer's exposed waiting time."""
        return InfeedStats(
            self._items,
            self._bytes,
            self._produce_seconds,
            self._wait_seconds,
            self._produce_cpu_seconds,
            len(self._threads),
            self._first_cpu_seconds,
        )


# -- data-size reduction ---------------------------------------------------------------------
_COMPRESSED_RANGES = {"uint8": (0.0, 255.0), "float16": (-65504.0, 65504.0)}


def compress(
    x: np.ndarray, *, dtype: str = "uint8", scale: float = 1.0, offset: float = 0.0
) -> np.ndarray:
    """Host side of the data-size reduction: ``(x - offset) / scale`` sent as uint8 or float16.

    uint8 rounds to the nearest integer (exact for data that already are small integers, such
    as pixel values); float16 rounds to half precision. :func:`decompress` undoes the affine map
    on the replica, so the normalisation costs replica compute instead of host-link bytes.

    Args:
        x: host array (any real dtype).
        dtype: ``"uint8"`` (4x fewer bytes than float32) or ``"float16"`` (2x).
        scale: divisor applied on the host (multiplied back on the replica); non-zero.
        offset: subtracted on the host (added back on the replica).

    Raises:
        ValueError: an unknown dtype, a zero scale, or values outside the target range.

    References:
        Memory and Performance Optimisation on the IPU, 4.4.3 "Data size reduction".
    """
    if dtype not in _COMPRESSED_RANGES:
        raise ValueError(
            f"compress: `dtype` must be one of {sorted(_COMPRESSED_RANGES)}, got {dtype!r}."
        )
    if scale == 0:
        raise ValueError("compress: `scale` must be non-zero, got 0; use 1.0 for no scaling.")
    y = (np.asarray(x, dtype=np.float64) - offset) / scale
    lo, hi = _COMPRESSED_RANGES[dtype]
    if y.size and (not np.all(np.isfinite(y)) or y.min() < lo - 0.5 or y.max() > hi + 0.5):
        raise ValueError(
            f"compress: `x` maps to [{np.nanmin(y)}, {np.nanmax(y)}] under (x - {offset}) / "
            f"{scale}, outside {dtype}'s range [{lo}, {hi}] (or not finite); choose `scale` and "
            f"`offset` so the data fit, or send float16/float32."
        )
    if dtype == "uint8":
        return np.rint(y).astype(np.uint8)
    return y.astype(np.float16)


_DECOMPRESS_JIT: dict[str, Callable[..., jax.Array]] = {}


def decompress(
    q: jax.Array | np.ndarray, *, scale: float = 1.0, offset: float = 0.0, dtype: str = "float32"
) -> jax.Array:
    """Replica side of the data-size reduction: ``q * scale + offset`` in ``dtype``, jitted.

    Compiled once per (input shape, dtype, scale, offset); runs on the replica's device, so the
    host link carries only the compressed bytes.
    """
    fn = _DECOMPRESS_JIT.get("fn")
    if fn is None:

        def _decompress(q: jax.Array, scale: float, offset: float, dtype: str) -> jax.Array:
            return q.astype(dtype) * np.asarray(scale, dtype) + np.asarray(offset, dtype)

        fn = _DECOMPRESS_JIT["fn"] = jax.jit(
            _decompress, static_argnames=("scale", "offset", "dtype")
        )
    return fn(q, scale=float(scale), offset=float(offset), dtype=str(dtype))
