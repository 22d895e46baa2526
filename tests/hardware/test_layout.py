"""Tests of the replica layout value type (hardware/_layout.py)."""

import pytest

from hardware import LayoutError, ReplicaLayout


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_replicas": 6, "num_instances": 4}, "not divisible by --num-instances 4"),
        ({"num_replicas": 2, "num_instances": 4}, "--num-instances 4 is more than"),
        ({"num_replicas": 4, "ipus_per_replica": 3}, "--ipus-per-replica 3 is not supported"),
        ({"num_replicas": 6, "num_instances": 2}, "6 IPUs, which is not a power of two"),
        ({"num_replicas": 0}, "--num-replicas 0 must be at least 1"),
        ({"num_replicas": 8, "num_instances": 4, "hosts": ("a", "b", "c")}, "evenly among 3"),
    ],
)
def test_refuses_layouts_poprun_refuses(kwargs, match):
    with pytest.raises(LayoutError, match=match):
        ReplicaLayout(**kwargs)


def test_sixteen_replicas_on_four_instances_matches_poprun():
    layout = ReplicaLayout(num_replicas=16, num_instances=4)
    assert layout.num_local_replicas == 4
    assert [layout.replica_offset(i) for i in range(4)] == [0, 4, 8, 12]
    assert list(layout.replicas_of_instance(3)) == [12, 13, 14, 15]


def test_instances_are_divided_evenly_among_hosts():
    layout = ReplicaLayout(num_replicas=8, num_instances=4, hosts=("h0", "h1"))
    assert [layout.host_of_instance(i) for i in range(4)] == ["h0", "h0", "h1", "h1"]
    assert [layout.local_instance_index(i) for i in range(4)] == [0, 1, 0, 1]
