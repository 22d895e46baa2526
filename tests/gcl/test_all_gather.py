"""gcl.all_gather rebuilds full leaves from shards (pure copies), shaped like `like`."""

from __future__ import annotations

import numpy as np
import pytest

import gcl


def test_rebuilds_full_leaves_from_group_shards():
    full = {"a": np.arange(10, dtype=np.float32), "b": np.arange(6.0).reshape(2, 3)}
    shards = []
    for p in range(4):
        a = np.zeros(12, np.float32)
        a[:10] = full["a"]
        b = np.zeros(8)
        b[:6] = full["b"].reshape(-1)
        shards.append({"a": a.reshape(4, 3)[p].copy(), "b": b.reshape(4, 2)[p].copy()})
    got = gcl.all_gather(shards, like=full)
    for g in got:
        np.testing.assert_array_equal(g["a"], full["a"])
        np.testing.assert_array_equal(g["b"], full["b"])
        assert g["b"].shape == (2, 3)


def test_like_may_be_shape_dtype_structs():
    jax = pytest.importorskip("jax")
    x = [np.arange(5.0) + r for r in range(2)]
    shards = gcl.reduce_scatter(x)
    got = gcl.all_gather(shards, like=jax.ShapeDtypeStruct((5,), np.float64))
    np.testing.assert_array_equal(got[0], x[0] + x[1])


def test_groups_gather_their_own_members():
    shards = [np.array([float(r)]) for r in range(4)]
    got = gcl.all_gather(shards, like=np.zeros(2), group=gcl.Orthogonal(2))
    np.testing.assert_array_equal(got[0], [0.0, 2.0])
    np.testing.assert_array_equal(got[3], [1.0, 3.0])


def test_shards_of_the_wrong_size_are_refused():
    with pytest.raises(ValueError, match=r"expected shapes \[\(3,\)\].*got shapes \[\(4,\)\]"):
        gcl.all_gather([np.ones(4)] * 4, like=np.zeros(10))
