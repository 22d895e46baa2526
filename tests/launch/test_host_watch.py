"""launch._host_watch: the launcher's look at real hosts (heartbeats, probes, what it says)."""

import os
import socket
import threading
import time

from deadlines import within

from launch._host_watch import host_lines, probe, settle, silent_hosts, stale
from launch._job import pid_path

HOSTS = ["h0", "h0", "h1", "h1"]  # the host of each instance


def test_a_listening_port_and_a_refusing_one_both_answer():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert probe("127.0.0.1", port, timeout=2) == ""
    assert probe("127.0.0.1", port, timeout=2) == ""  # closed now: refused, the host is there


def test_a_name_that_does_not_resolve_is_said_so():
    assert probe("no-such-host.invalid", timeout=2) == "its name does not resolve"
    assert silent_hosts(["no-such-host.invalid", "127.0.0.1"]) == {
        "no-such-host.invalid": "its name does not resolve"
    }


def test_a_started_instance_is_stale_only_once_it_stops_renewing(tmp_path):
    job = str(tmp_path)
    assert not stale(job, 0)  # not started: nothing to be stale
    with open(pid_path(job, 0), "w") as f:
        f.write("1 1\n")
    now = time.time_ns()
    assert not stale(job, 0, now)
    os.utime(pid_path(job, 0), ns=(now - 6 * 10**9, now - 6 * 10**9))
    assert stale(job, 0, now)


def test_settle_returns_at_once_for_live_instances_and_names_the_dead(tmp_path):
    job = str(tmp_path)
    for i in range(3):
        with open(pid_path(job, i), "w") as f:
            f.write("1 1\n")
    stop = threading.Event()

    def beat():  # instance 0 lives; instance 1 reports a status; instance 2 is dead
        while not stop.wait(0.1):
            os.utime(pid_path(job, 0))

    threading.Thread(target=beat, daemon=True).start()
    began = time.monotonic()
    try:
        assert settle(job, [0, 1, 2], lambda: {1}, timeout=1.0) == [2]
    finally:
        stop.set()
    assert time.monotonic() - began < within(3)
    began = time.monotonic()
    threading.Thread(target=lambda: (time.sleep(0.2), os.utime(pid_path(job, 0)))).start()
    assert settle(job, [0, 1], lambda: {1}, timeout=5.0) == []
    assert time.monotonic() - began < within(2)  # no wait for the whole timeout


def test_each_host_is_named_once_with_its_instances_and_why():
    lines = host_lines(
        HOSTS, silent={"h1": "no reply on port 22 within 2 s"}, not_started=[2, 3], start_timeout=5
    )
    assert lines == [
        "host h1 did not start instances 2, 3 within 5 s (--collective-timeout bounds the start "
        "too): it does not answer (no reply on port 22 within 2 s): its network link or the "
        "machine is down"
    ]
    lines = host_lines(HOSTS, silent={}, lost=[2, 3])
    assert lines == [
        "host h1: instances 2, 3 (all it ran) ended without an exit status: their processes "
        "were killed, or the host went down"
    ]
    assert host_lines(HOSTS, silent={"h0": "x"}) == [
        "host h0 (instances 0, 1) stopped answering (x): its network link or the machine is down"
    ]
    assert host_lines(HOSTS, silent={}, lost=[3]) == [
        "host h1: instance 3 ended without an exit status: its process was killed, or the host "
        "went down"
    ]
    assert host_lines(HOSTS, silent={}) == []
    # A host that does not answer is named with all it ran, whichever heartbeat went stale
    # first (the same line however the end was found).
    assert host_lines(HOSTS, silent={"h1": "x"}, lost=[2]) == [
        "host h1 (instances 2, 3) stopped answering (x): its network link or the machine is down"
    ]
