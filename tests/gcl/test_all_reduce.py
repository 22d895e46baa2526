"""gcl.all_reduce against the NumPy statement of its reduction order, in one process
(every replica local); the multi-instance runs are in test_layouts.py."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from gcl_reference import OPS, all_reduce, draw_case
from hypothesis import given, settings
from hypothesis import strategies as st

import gcl

REPLICAS = st.sampled_from([1, 2, 4, 8])


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    got = np.asarray(got)
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@st.composite
def cases(draw):
    num = draw(REPLICAS)
    seed = draw(st.integers(0, 2**32 - 1))
    case = draw_case(np.random.default_rng(seed), num)
    case["op"] = draw(st.sampled_from(OPS))
    case["method"] = draw(st.sampled_from([*gcl.METHODS]))
    return case


@settings(max_examples=30)
@given(cases())
def test_matches_reference_order_bit_for_bit(case):
    got = gcl.all_reduce(case["values"], case["op"], method=case["method"], group=case["group"])
    want = all_reduce(case["values"], case["op"], case["method"], case["group"])
    for r, (g, w) in enumerate(zip(got, want, strict=True)):
        assert all(_same_bits(a, b) for a, b in zip(g, w, strict=True)), f"replica {r}"


@pytest.mark.parametrize("method", gcl.METHODS)
@pytest.mark.parametrize("op", OPS)
def test_every_operator_and_method_agrees_with_numpy(op, method):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(37) for _ in range(8)]
    numpy_op = {"add": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "mul": np.prod}
    want = numpy_op[op](np.stack(xs), axis=0)
    got = gcl.all_reduce(xs, op, method=method)
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-12)


def test_operator_enum_is_accepted():
    xs = [np.arange(4.0), np.arange(4.0) + 1]
    np.testing.assert_array_equal(gcl.all_reduce(xs, gcl.Operator.MAX)[0], xs[1])


def test_methods_differ_only_in_rounding_order():
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(1000).astype(np.float32) for _ in range(8)]
    results = {m: gcl.all_reduce(xs, method=m)[0] for m in gcl.METHODS}
    assert len({r.tobytes() for r in results.values()}) > 1  # the order is really different
    for r in results.values():
        np.testing.assert_allclose(r, np.sum(np.stack(xs), axis=0, dtype=np.float64), atol=1e-5)


Params = collections.namedtuple("Params", "w b")


def test_pytrees_keep_their_structure():
    tree = {"dense": Params(np.ones((2, 3)), np.zeros(3, np.float32)), "x": [np.ones(1), None]}
    got = gcl.all_reduce([tree, tree], "add")
    assert isinstance(got[0]["dense"], Params)
    np.testing.assert_array_equal(got[0]["dense"].w, 2 * np.ones((2, 3)))
    assert got[0]["dense"].b.dtype == np.float32
    assert got[1]["x"][1] is None


def test_group_members_share_one_read_only_result():
    got = gcl.all_reduce([np.ones(8) for _ in range(4)], group=gcl.Consecutive(2))
    assert got[0] is got[1] and got[2] is got[3] and got[0] is not got[2]
    with pytest.raises(ValueError, match="read-only"):
        got[0][0] = 1.0


def test_jax_arrays_are_leaves_and_results_feed_jit():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    xs = [{"w": jnp.full((3, 2), float(r + 1), jnp.float32)} for r in range(4)]
    got = gcl.all_reduce(xs, "mean")
    want = gcl.all_reduce([{"w": np.asarray(x["w"])} for x in xs], "mean")
    assert got[0]["w"].tobytes() == want[0]["w"].tobytes()
    step = jax.jit(lambda p, g: jax.tree_util.tree_map(lambda a, b: a - 0.5 * b, p, g))
    new = step(xs[0], got[0])
    np.testing.assert_allclose(np.asarray(new["w"]), 1.0 - 0.5 * 2.5)


def test_mismatched_local_replicas_name_the_replica():
    with pytest.raises(ValueError, match=r"global replica 1 .*float32\[3\].*replica 0 has"):
        gcl.all_reduce([np.ones(2, np.float32), np.ones(3, np.float32)])


def test_mismatched_tree_structure_is_reported():
    with pytest.raises(ValueError, match="same structure"):
        gcl.all_reduce([{"a": np.ones(2)}, {"b": np.ones(2)}])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"op": "sum"}, ValueError, "`op` must be one of"),
        ({"method": "ring"}, ValueError, "`method` must be 'auto' or one of"),
        ({"group": 2}, TypeError, "`group` must be gcl.All"),
        ({"group": gcl.Consecutive(3)}, ValueError, "divides the 4 replicas"),
        ({"timeout": 0}, ValueError, "`timeout` must be a positive"),
    ],
)
def test_bad_arguments_say_what_to_pass(kwargs, error, match):
    with pytest.raises(error, match=match):
        gcl.all_reduce([np.ones(4)] * 4, **kwargs)


def test_values_must_be_a_sequence_of_replicas():
    with pytest.raises(TypeError, match="one entry per local replica"):
        gcl.all_reduce(np.ones(4))
    with pytest.raises(ValueError, match="is empty"):
        gcl.all_reduce([])


def test_mean_of_integers_is_refused():
    with pytest.raises(TypeError, match="integer dtype int32 and op='mean'"):
        gcl.all_reduce([np.ones(3, np.int32)] * 2, "mean")
    np.testing.assert_array_equal(gcl.all_reduce([np.ones(3, np.int32)] * 2)[0], [2, 2, 2])


def test_auto_is_a_function_of_size_and_group_only():
    assert gcl.resolve_method("auto", 1000, 8) == "meet_in_middle_ring"
    assert gcl.resolve_method("auto", 64 << 20, 8) == "clockwise_ring"
    assert gcl.resolve_method("auto", 1000, 2) == "clockwise_ring"
    assert gcl.resolve_method("anticlockwise_ring", 1000, 8) == "anticlockwise_ring"
