"""The PopDist API read from PopRun's environment: defaults outside PopRun, every instance's
view of a layout inside it, and the helpers (device IDs, execute_on_instances)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import popdist_emu as popdist
from contract import layout_environment
from hardware import ReplicaLayout

POPDIST_VARIABLES = (
    "POPDIST_NUM_TOTAL_REPLICAS",
    "POPDIST_NUM_LOCAL_REPLICAS",
    "POPDIST_NUM_IPUS_PER_REPLICA",
    "POPDIST_REPLICA_INDEX_OFFSET",
    "POPDIST_LOCAL_INSTANCE_INDEX",
    "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE",
    "POPDIST_EMU_INSTANCE_INDEX",
    "POPDIST_EMU_HOSTS",
)


@pytest.fixture(autouse=True)
def outside_poprun(monkeypatch):
    for name in POPDIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _enter(monkeypatch, layout, instance):
    for name, value in layout_environment(layout, instance).items():
        monkeypatch.setenv(name, value)


def test_defaults_outside_poprun():
    assert popdist.isPopdistEnvSet() is False
    assert popdist.getNumTotalReplicas() == 1
    assert popdist.getNumLocalReplicas() == 1
    assert popdist.getNumInstances() == 1
    assert popdist.getInstanceIndex() == 0
    assert popdist.getLocalInstanceIndex() == 0
    assert popdist.getReplicaIndexOffset() == 0
    assert popdist.getNumIpusPerReplica() == 1
    assert popdist.getDeviceId() == 0
    assert popdist.checkNumIpusPerReplica(1) and not popdist.checkNumIpusPerReplica(2)


layouts = st.builds(
    lambda log_replicas, log_instances, ipr, hosts: ReplicaLayout(
        num_replicas=2**log_replicas,
        num_instances=2 ** min(log_instances, log_replicas),
        ipus_per_replica=ipr,
        hosts=tuple(f"h{i}" for i in range(min(hosts, 2 ** min(log_instances, log_replicas)))),
    ),
    st.integers(0, 5),
    st.integers(0, 4),
    st.sampled_from([1, 2, 4, 8, 16]),
    st.sampled_from([1, 2]),
)


@given(layouts)
def test_every_instance_sees_its_part_of_the_layout(layout):
    mp = pytest.MonkeyPatch()
    offsets = []
    try:
        for instance in range(layout.num_instances):
            _enter(mp, layout, instance)
            assert popdist.isPopdistEnvSet()
            assert popdist.getNumTotalReplicas() == layout.num_replicas
            assert popdist.getNumLocalReplicas() == layout.num_local_replicas
            assert popdist.getNumInstances() == layout.num_instances
            assert popdist.getInstanceIndex() == instance
            assert popdist.getLocalInstanceIndex() == layout.local_instance_index(instance)
            assert popdist.getNumIpusPerReplica() == layout.ipus_per_replica
            assert popdist.checkNumIpusPerReplica(layout.ipus_per_replica)
            offsets.append(popdist.getReplicaIndexOffset())
            # How PopDist example code derives the instance from the replica counts.
            local = popdist.getNumLocalReplicas()
            assert popdist.getReplicaIndexOffset() // local == instance
            assert popdist.getNumTotalReplicas() // local == popdist.getNumInstances()
    finally:
        mp.undo()
    assert offsets == list(range(0, layout.num_replicas, layout.num_local_replicas))


def test_the_issue_layout_16_replicas_on_4_instances(monkeypatch):
    layout = ReplicaLayout(num_replicas=16, num_instances=4)
    views = []
    for instance in range(4):
        _enter(monkeypatch, layout, instance)
        views.append(
            (
                popdist.getReplicaIndexOffset(),
                popdist.getNumLocalReplicas(),
                popdist.getNumInstances(),
            )
        )
    assert views == [(0, 4, 4), (4, 4, 4), (8, 4, 4), (12, 4, 4)]


@pytest.mark.parametrize(
    ("replicas", "instances", "ipr", "hosts", "expected"),
    [
        # One host, 4 IPUs: singles 0-3, pairs 4-5, the quad 6.
        (4, 1, 1, 1, [6]),
        (4, 2, 1, 1, [4, 5]),
        (4, 4, 1, 1, [0, 1, 2, 3]),
        # 8 IPUs: singles 0-7, pairs 8-11, quads 12-13.
        (4, 2, 2, 1, [12, 13]),
        (8, 4, 2, 2, [12, 13, 12, 13]),
    ],
)
def test_device_ids_follow_poplar_numbering(monkeypatch, replicas, instances, ipr, hosts, expected):
    layout = ReplicaLayout(
        num_replicas=replicas,
        num_instances=instances,
        ipus_per_replica=ipr,
        hosts=tuple(f"h{i}" for i in range(hosts)),
    )
    ids = []
    for instance in range(instances):
        _enter(monkeypatch, layout, instance)
        ids.append(popdist.getDeviceId())
    assert ids == expected


def test_device_id_for_another_replica_size(monkeypatch):
    _enter(monkeypatch, ReplicaLayout(num_replicas=4, num_instances=4), 1)
    # Asked for 2 IPUs per replica, instance 1's replica is IPUs 2-3: the second pair, after
    # the 4 single IPUs.
    assert popdist.getDeviceId(2) == 5
    with pytest.raises(ValueError, match="`ipusPerReplica` must be one of 1, 2, 4, 8, 16"):
        popdist.getDeviceId(3)


def test_execute_on_instances(monkeypatch):
    layout = ReplicaLayout(num_replicas=4, num_instances=4)
    results = []
    for instance in range(4):
        _enter(monkeypatch, layout, instance)
        results.append(popdist.execute_on_instances({0, 2}, lambda x, y=0: x + y, 1, y=instance))
    assert results == [1, None, 3, None]
    with pytest.raises(ValueError, match=r"`instances` must lie in \[0, 4\), got \[4\]"):
        popdist.execute_on_instances([4], print)


def test_malformed_environment_is_named(monkeypatch):
    monkeypatch.setenv("POPDIST_NUM_LOCAL_REPLICAS", "four")
    with pytest.raises(ValueError, match="POPDIST_NUM_LOCAL_REPLICAS='four' is not an integer"):
        popdist.getNumLocalReplicas()
