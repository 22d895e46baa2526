"""--print-topology: one row per instance with its host, replicas and IPUs."""

from hardware import ReplicaLayout
from launch import format_topology


def _rows(text):
    lines = text.splitlines()
    return [[cell.strip() for cell in line.split("|")] for line in lines[3:]]


def test_topology_of_two_hosts():
    layout = ReplicaLayout(num_replicas=8, num_instances=4, ipus_per_replica=2, hosts=("a", "b"))
    text = format_topology(layout)
    lines = text.splitlines()
    assert lines[0].startswith("8 replicas x 2 IPUs per replica = 16 IPUs, 4 instances on 2 hosts")
    assert "simulated" in lines[0]
    assert [c.strip() for c in lines[1].split("|")] == [
        "host",
        "instance",
        "local index",
        "replicas",
        "IPUs",
    ]
    assert _rows(text) == [
        ["a", "0", "0", "0-1", "0-3"],
        ["a", "1", "1", "2-3", "4-7"],
        ["b", "2", "0", "4-5", "8-11"],
        ["b", "3", "1", "6-7", "12-15"],
    ]


def test_topology_of_one_replica():
    assert _rows(format_topology(ReplicaLayout())) == [["localhost", "0", "0", "0", "0"]]


def test_every_replica_and_ipu_appears_once():
    layout = ReplicaLayout(num_replicas=16, num_instances=4, ipus_per_replica=4)
    replicas, ipus = [], []
    for row in _rows(format_topology(layout)):
        for cell, seen in ((row[3], replicas), (row[4], ipus)):
            first, _, last = cell.partition("-")
            seen.extend(range(int(first), int(last or first) + 1))
    assert replicas == list(range(16))
    assert ipus == list(range(64))
