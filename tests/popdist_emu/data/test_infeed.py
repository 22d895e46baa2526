"""The host-IO infeed: ordered, exactly-once delivery, bounded prefetch, errors, shutdown."""

import random
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popdist_emu._trees import tree_nbytes
from popdist_emu.data._infeed import (
    DEFAULT_PREFETCH_DEPTH,
    Infeed,
    InfeedError,
    compress,
    decompress,
)


def _infeed_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("infeed-")]


@pytest.fixture(autouse=True)
def no_leaked_threads():
    yield
    deadline = time.monotonic() + 5
    while _infeed_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _infeed_threads() == []


@settings(max_examples=25)
@given(
    num_items=st.integers(0, 40),
    depth=st.integers(1, 6),
    workers=st.integers(1, 5),
    start=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_delivers_every_item_once_in_order(num_items, depth, workers, start, seed):
    jitter = random.Random(seed)
    delays = [jitter.random() * 0.002 for _ in range(num_items + start)]
    produced = []
    lock = threading.Lock()

    def produce(i):
        time.sleep(delays[i])  # workers finish out of order
        with lock:
            produced.append(i)
        return {"x": np.full(3, i, np.float32), "step": i}

    with Infeed(produce, num_items, prefetch_depth=depth, workers=workers, start=start) as feed:
        got = [item["step"] for item in feed]
        assert [int(item) for item in got] == list(range(start, start + num_items))
    assert sorted(produced) == list(range(start, start + num_items))
    assert feed.stats.items == num_items
    assert feed.stats.bytes == 12 * num_items
    assert feed.alive_workers == 0


@settings(max_examples=15)
@given(depth=st.integers(1, 5), workers=st.integers(1, 4))
def test_never_prepares_more_than_prefetch_depth_ahead(depth, workers):
    requested = 0  # next() calls started: the consumer's position can only lag behind it
    worst = 0
    lock = threading.Lock()

    def produce(i):
        nonlocal worst
        with lock:
            worst = max(worst, i + 1 - requested)
        return i

    with Infeed(produce, 30, prefetch_depth=depth, workers=workers) as feed:
        for _ in range(30):
            with lock:
                requested += 1
            next(feed)
            time.sleep(0.0005)  # a slow consumer lets the workers run ahead as far as allowed
    assert 1 <= worst <= depth


def test_workers_fill_the_prefetch_window_and_stop_there():
    produced = []
    feed = Infeed(produced.append, None, prefetch_depth=3, workers=2)
    next(feed)
    deadline = time.monotonic() + 5
    while len(produced) < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    assert sorted(produced) == [0, 1, 2, 3]  # item 0 delivered, 1..3 prepared ahead
    feed.close()


def test_prefetch_and_more_workers_hide_io_behind_compute():
    def produce(i):
        time.sleep(0.03)  # host IO per item: 3x the compute, so one worker cannot keep up
        return i

    def exposed(depth, workers):
        with Infeed(produce, 12, prefetch_depth=depth, workers=workers) as feed:
            for _ in feed:
                time.sleep(0.01)  # compute per step
        return feed.stats.wait_seconds

    serial = exposed(1, 1)  # ~12 x (30 - 10) ms exposed
    overlapped = exposed(3, 3)  # three items in flight: ~only the first item's IO exposed
    assert serial > 0.15
    assert overlapped < serial / 2


def test_cpu_time_counts_the_workers_work_not_their_waits():
    def produce(i):
        time.sleep(0.02)  # waiting (IO, a crowded machine) is not the host's work
        return sum(k * k for k in range(20_000))  # this is

    with Infeed(produce, 4, prefetch_depth=2, workers=2) as feed:
        for _ in feed:
            pass
    stats = feed.stats
    assert stats.workers == 2 and stats.items == 4
    assert stats.produce_seconds >= 4 * 0.02
    assert 0 < stats.produce_cpu_seconds < stats.produce_seconds - 3 * 0.02


def test_endless_stream_and_early_close():
    feed = Infeed(lambda i: i * i, None, prefetch_depth=4, workers=3)
    first = [next(feed) for _ in range(7)]
    feed.close()
    assert first == [i * i for i in range(7)]
    assert feed.alive_workers == 0
    with pytest.raises(StopIteration):
        next(feed)
    feed.close()  # idempotent


def test_break_out_of_loop_leaves_no_threads():
    with Infeed(lambda i: i, 1000, prefetch_depth=DEFAULT_PREFETCH_DEPTH, workers=2) as feed:
        for i in feed:
            if i == 5:
                break
    assert feed.alive_workers == 0


def test_training_loop_exception_closes_workers():
    with pytest.raises(ZeroDivisionError), Infeed(lambda i: i, None, workers=3) as feed:
        for i in feed:
            if i == 4:
                _ = 1 / 0
    assert feed.alive_workers == 0


@settings(max_examples=15)
@given(bad=st.integers(0, 12), depth=st.integers(1, 4), workers=st.integers(1, 3))
def test_worker_exception_surfaces_with_its_item(bad, depth, workers):
    def produce(i):
        if i == bad:
            raise KeyError(f"sample {i} is missing")
        return i

    got = []
    feed = Infeed(produce, 20, prefetch_depth=depth, workers=workers)
    with pytest.raises(InfeedError, match=rf"producing item {bad} \(step {bad}\) failed") as info:
        got.extend(feed)
    # Every item before the failing one is still delivered, in order.
    assert got == list(range(bad))
    assert info.value.index == bad
    assert isinstance(info.value.__cause__, KeyError)
    assert feed.alive_workers == 0


def test_bounded_join_when_a_worker_hangs():
    release = threading.Event()

    def produce(i):
        if i == 1:
            release.wait(10)
        return i

    feed = Infeed(produce, 5, prefetch_depth=2, workers=2, join_timeout=0.2)
    assert next(feed) == 0
    began = time.perf_counter()
    feed.close()
    assert time.perf_counter() - began < 2.0
    assert feed.alive_workers >= 1  # stuck inside produce: reported, not waited for forever
    release.set()
    deadline = time.monotonic() + 5
    while feed.alive_workers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert feed.alive_workers == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prefetch_depth": 0}, "`prefetch_depth` must be an int >= 1, got 0"),
        ({"workers": 0}, "`workers` must be an int >= 1, got 0"),
        ({"num_items": -1}, "`num_items` must be a non-negative int or None"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"num_items": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        Infeed(lambda i: i, args.pop("num_items"), **args)


def test_tree_nbytes_counts_array_leaves_only():
    tree = {"x": np.zeros((2, 3), np.float32), "y": [np.zeros(4, np.uint8), 7, "name"]}
    assert tree_nbytes(tree) == 24 + 4


@settings(max_examples=20)
@given(
    values=st.lists(st.integers(0, 16), min_size=1, max_size=64),
    dtype=st.sampled_from(["uint8", "float16"]),
)
def test_compress_then_decompress_restores_integral_pixels(values, dtype):
    x = np.asarray(values, np.float32) / 16.0  # normalised pixels as a loader would give
    q = compress(x, dtype=dtype, scale=1 / 16)
    assert q.dtype == np.dtype(dtype)
    assert q.nbytes * (4 if dtype == "uint8" else 2) == x.nbytes
    y = np.asarray(decompress(q, scale=1 / 16))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, x)


def test_compress_refuses_values_out_of_range():
    with pytest.raises(ValueError, match="outside uint8's range"):
        compress(np.array([0.0, 300.0]), dtype="uint8")
    with pytest.raises(ValueError, match="`dtype` must be one of"):
        compress(np.array([0.0]), dtype="int4")
