"""gcl.broadcast: every member gets its group root's value."""

from __future__ import annotations

import numpy as np
import pytest
from gcl_reference import broadcast, draw_case
from hypothesis import given, settings
from hypothesis import strategies as st

import gcl


@settings(max_examples=20)
@given(st.sampled_from([1, 2, 4, 8]), st.integers(0, 2**32 - 1))
def test_matches_reference(num, seed):
    case = draw_case(np.random.default_rng(seed), num)
    got = gcl.broadcast(case["values"], root=case["root"], group=case["group"])
    want = broadcast(case["values"], case["root"], case["group"])
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            assert a.shape == b.shape and a.tobytes() == b.tobytes()


def test_root_is_a_position_in_the_group():
    xs = [np.full(3, float(r)) for r in range(4)]
    got = gcl.broadcast(xs, root=1, group=gcl.Consecutive(2))
    assert [g[0] for g in got] == [1.0, 1.0, 3.0, 3.0]
    with pytest.raises(ValueError, match=r"`root` is a position within the group.*\[0, 2\)"):
        gcl.broadcast(xs, root=2, group=gcl.Consecutive(2))
