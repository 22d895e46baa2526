"""launch._end_order: which watched bootstrap ended first, with real processes."""

import os
import subprocess
import time

import pytest
from deadlines import within

from contract import orphaned_path, pid_path, write_atomically
from launch._end_order import EndOrder
from launch._job_processes import Groups, killed_first

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open")


def _sleepers(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(n)]


def _until_seen(order: EndOrder, among: list[int]) -> int | None:
    deadline = time.monotonic() + within(10)
    while (first := order.first(among)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return first


def test_the_bootstrap_that_ended_first_is_named_whatever_ended_after_it():
    procs = _sleepers(3)
    order = EndOrder()
    try:
        for i, proc in enumerate(procs):
            order.watch(i, proc.pid, lambda: True)
        assert order.first([0, 1, 2]) is None  # nothing has ended
        procs[1].kill()
        assert _until_seen(order, [0, 1, 2]) == 1
        for proc in (procs[0], procs[2]):
            proc.kill()
            proc.wait()
    finally:
        order.close()
        for proc in procs:
            proc.kill()
            proc.wait()


def test_ends_seen_before_both_were_waited_on_are_not_told_apart():
    """Both had ended (zombies, not yet reaped) when they were first watched: whether the
    thread's first wake-up waited on one or both, it cannot order them."""
    procs = _sleepers(2)
    for proc in procs:
        proc.kill()
    for proc in procs:  # ended, unreaped: os.waitid with WNOWAIT leaves the zombie
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    order = EndOrder()
    try:
        for i, proc in enumerate(procs):
            order.watch(i, proc.pid, lambda: True)
        deadline = time.monotonic() + within(2)
        while time.monotonic() < deadline:
            assert order.first([0, 1]) is None
            time.sleep(0.05)
        assert order.first([1]) == 1  # alone among those asked about
    finally:
        order.close()
        for proc in procs:
            proc.wait()


def test_a_pid_no_longer_ours_once_opened_is_not_watched():
    (proc,) = _sleepers(1)
    order = EndOrder()
    try:
        order.watch(0, proc.pid, lambda: False)
        proc.kill()
        proc.wait()
        time.sleep(0.2)
        assert order.first([0]) is None
    finally:
        order.close()


def test_killed_first_names_the_bootstrap_that_ended_first_without_any_record(tmp_path):
    """MPICH kills the other instances about a tenth of a second after the first; under load
    the killed bootstrap's orphaned program was killed too before it recorded anything, and
    the two were named together. The end order decides."""
    procs = _sleepers(2)
    for i, proc in enumerate(procs):
        with open(pid_path(str(tmp_path), i), "w") as f:
            f.write(f"{proc.pid} {proc.pid}\n")
    groups = Groups(str(tmp_path), [0, 1], os.getpid())
    try:
        assert groups() == {i: (p.pid, p.pid) for i, p in enumerate(procs)}
        procs[1].kill()
        assert _until_seen(groups.end_order, [0, 1]) == 1
        procs[0].kill()
        for proc in procs:
            proc.wait()
        assert killed_first(groups, [0, 1]) == ([1, 0], True)
    finally:
        groups.close()
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_candidate_never_watched_leaves_the_order_unknown():
    """Instance 0's bootstrap was gone before it could be watched (killed before the
    watchdog's first look); instance 1, watched, ended after it. Seeing 1 end alone says
    nothing of 0."""
    (proc,) = _sleepers(1)
    order = EndOrder()
    try:
        order.watch(1, proc.pid, lambda: True)
        proc.kill()
        assert _until_seen(order, [1]) == 1
        assert order.first([0, 1]) is None
    finally:
        order.close()
        order.close()  # twice is harmless
        proc.wait()


def test_the_orphan_record_of_an_unwatched_bootstrap_is_not_overruled(tmp_path):
    """Instance 0's bootstrap was killed and reaped before the watchdog's first look (its
    orphaned program recorded the death); MPICH then killed instance 1's, which the end
    order saw alone. The record names instance 0; the end order had named 1."""
    dead = subprocess.Popen(["true"], start_new_session=True)
    dead.wait()
    (alive,) = _sleepers(1)
    for i, pid in enumerate((dead.pid, alive.pid)):
        with open(pid_path(str(tmp_path), i), "w") as f:
            f.write(f"{pid} {pid}\n")
    groups = Groups(str(tmp_path), [0, 1], os.getpid())
    try:
        assert groups() == {1: (alive.pid, alive.pid)}  # 0 is gone: not this job's any more
        groups.known[0] = (dead.pid, dead.pid)  # as an orphaned group would make it known
        write_atomically(orphaned_path(str(tmp_path), 0), f"{time.time_ns()}\n")
        alive.kill()
        alive.wait()
        assert _until_seen(groups.end_order, [1]) == 1
        assert killed_first(groups, [0, 1]) == ([0, 1], True)
    finally:
        groups.close()
