"""Collective groups as GCL/PopART define them (CommGroup::toReplicaGrouping)."""

from __future__ import annotations

import numpy as np
import pytest

import gcl


def _members_seen(group, num):
    # Broadcast of each replica's own index from root 0 reveals the first member of its
    # group; all_gather of one-element shards reveals the whole group in ring order.
    shards = [np.array([float(r)]) for r in range(num)]
    size = num if isinstance(group, gcl.All) else group.k
    return [
        tuple(int(v) for v in g) for g in gcl.all_gather(shards, like=np.zeros(size), group=group)
    ]


def test_consecutive_groups_are_blocks():
    assert _members_seen(gcl.Consecutive(2), 4) == [(0, 1), (0, 1), (2, 3), (2, 3)]


def test_orthogonal_groups_have_stride_num_replicas_over_k():
    seen = _members_seen(gcl.Orthogonal(2), 8)
    assert seen[0] == (0, 4) and seen[5] == (1, 5) and seen[7] == (3, 7)
    assert _members_seen(gcl.Orthogonal(4), 8)[1] == (1, 3, 5, 7)


def test_all_is_every_replica():
    assert _members_seen(gcl.All(), 4)[2] == (0, 1, 2, 3)
    assert gcl.All().size(16) == 16


@pytest.mark.parametrize("group", [gcl.Consecutive(3), gcl.Orthogonal(0)])
def test_sizes_must_divide_the_replicas(group):
    with pytest.raises(ValueError, match=r"divides the 8 replicas: expected one of \[1, 2, 4, 8\]"):
        group.size(8)
