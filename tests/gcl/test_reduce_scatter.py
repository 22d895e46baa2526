"""gcl.reduce_scatter: shards of ceil(size / G) elements, zero-padded at the end, equal to the
NumPy statement of the ring order; all_gather(reduce_scatter(x)) is all_reduce(x)."""

from __future__ import annotations

import numpy as np
import pytest
from gcl_reference import OPS, draw_case, reduce_scatter
from hypothesis import given, settings
from hypothesis import strategies as st

import gcl


@st.composite
def cases(draw):
    num = draw(st.sampled_from([1, 2, 4, 8]))
    case = draw_case(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), num)
    case["op"] = draw(st.sampled_from(OPS))
    case["method"] = draw(st.sampled_from([*gcl.METHODS]))
    return case


@settings(max_examples=30)
@given(cases())
def test_matches_reference_order_bit_for_bit(case):
    got = gcl.reduce_scatter(case["values"], case["op"], method=case["method"], group=case["group"])
    want = reduce_scatter(case["values"], case["op"], case["method"], case["group"])
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@settings(max_examples=20)
@given(cases())
def test_all_gather_of_shards_is_all_reduce(case):
    kw = {"method": case["method"], "group": case["group"]}
    shards = gcl.reduce_scatter(case["values"], case["op"], **kw)
    gathered = gcl.all_gather(shards, like=case["values"][0], group=case["group"])
    reduced = gcl.all_reduce(case["values"], case["op"], **kw)
    for g, r in zip(gathered, reduced, strict=True):
        for a, b in zip(g, r, strict=True):
            assert a.shape == b.shape and a.tobytes() == b.tobytes()


def test_rts_shard_layout_pads_the_end_with_zeros():
    # 30 elements over 4 replicas: shards of ceil(30 / 4) = 8, the last one padded.
    xs = [np.arange(30, dtype=np.float32) + r for r in range(4)]
    shards = gcl.reduce_scatter(xs)
    total = np.sum(np.stack(xs), axis=0)
    assert [s.shape for s in shards] == [(8,)] * 4
    np.testing.assert_array_equal(np.concatenate(shards)[:30], total)
    np.testing.assert_array_equal(shards[3][6:], [0, 0])


def test_replica_gets_the_shard_of_its_group_position():
    xs = [np.arange(4.0) * (r + 1) for r in range(4)]
    shards = gcl.reduce_scatter(xs, group=gcl.Orthogonal(2))  # groups {0, 2}, {1, 3}
    np.testing.assert_array_equal(shards[2], (xs[0] + xs[2])[2:])
    np.testing.assert_array_equal(shards[1], (xs[1] + xs[3])[:2])


def test_mean_is_add_then_one_division():
    xs = [np.array([1.0, 2.0, 3.0], np.float32) / 3 for _ in range(4)]
    got = gcl.reduce_scatter(xs, "mean", method="clockwise_ring", group=gcl.All())
    added = gcl.reduce_scatter(xs, "add", method="clockwise_ring")
    for g, a in zip(got, added, strict=True):
        np.testing.assert_array_equal(g, a / np.float32(4))


def test_mismatched_replicas_are_refused():
    with pytest.raises(ValueError, match="global replica 1"):
        gcl.reduce_scatter([np.ones(4, np.float32), np.ones(4, np.float64)])
