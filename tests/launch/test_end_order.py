"""launch._end_order: which watched bootstrap ended first, with real processes."""

import os
import subprocess
import time

import pytest
from deadlines import within

from contract import pid_path
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
        time.sleep(0.2)  # seen by now, after instance 1
        assert order.first([0, 1, 2]) == 1
    finally:
        order.close()
        for proc in procs:
            proc.kill()
            proc.wait()


def test_ends_seen_in_one_wake_up_are_not_told_apart():
    """Both had ended (zombies, not yet reaped) when they were first watched: no order."""
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
