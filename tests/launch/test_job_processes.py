"""What the watchdog learns about a job's processes from ``/proc``, with real processes."""

import os
import signal
import subprocess
import sys
import threading
import time

from deadlines import within

from contract import ENV_JOB_DIR, orphaned_path, pid_alive, pid_path, write_atomically
from launch._exits import read_exits
from launch._failure_text import unordered_kills
from launch._job import status_path
from launch._job_processes import Groups, killed_first, vanished

# A group leader that starts a sleeping child and exits at once, leaving the child orphaned in
# its group; it prints the child's pid.
LEADER = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(child.pid, flush=True)\n"
)


def _record(job_dir, instance: int, pid: int) -> None:
    with open(pid_path(str(job_dir), instance), "w") as f:
        f.write(f"{pid} {pid}\n")


def _orphaned_group(env: dict[str, str]) -> tuple[int, int]:
    """``(dead leader, its orphaned child)``: the leader is reaped, the child sleeps on."""
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **env},
    )
    child = int(leader.stdout.readline())
    leader.wait()
    return leader.pid, child


def test_a_zombie_bootstrap_has_vanished(tmp_path):
    """A killed bootstrap stays a zombie until the MPI's process manager reaps it, which
    MPICH's proxy may not do while the orphaned program holds the rank's PMI connection: the
    job then ran until its program ended."""
    bootstrap = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        _record(tmp_path, 0, bootstrap.pid)
        groups = Groups(str(tmp_path), [0], os.getpid())
        assert groups() == {0: (bootstrap.pid, bootstrap.pid)} and not list(vanished(groups, {}))
        bootstrap.kill()
        deadline = time.monotonic() + within(10)
        while pid_alive(bootstrap.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.path.exists(f"/proc/{bootstrap.pid}")  # not reaped: a zombie
        assert list(vanished(groups, {})) == [0]
        groups.close()
    finally:
        bootstrap.kill()
        bootstrap.wait()


def test_a_group_whose_leader_died_before_the_first_look_is_known_by_its_job(tmp_path):
    """Killed before the watchdog first read its pid file, a bootstrap cannot be traced to the
    launcher; its program, orphaned in its group, carries the job's directory."""
    ours, ours_child = _orphaned_group({ENV_JOB_DIR: str(tmp_path)})
    other, other_child = _orphaned_group({ENV_JOB_DIR: str(tmp_path / "another-job")})
    try:
        _record(tmp_path, 0, ours)
        _record(tmp_path, 1, other)
        groups = Groups(str(tmp_path), [0, 1], os.getpid())
        assert groups() == {0: (ours, ours)}  # the other job's group is never signalled
        assert groups.remote == {1}
        assert list(vanished(groups, {})) == [0]
        groups.close()
    finally:
        for pid in (ours_child, other_child):
            os.kill(pid, signal.SIGKILL)


def test_a_bootstrap_that_wrote_its_status_after_the_statuses_were_read_has_not_vanished(
    tmp_path,
):
    """The watchdog reads the statuses, then looks at the bootstraps: one that wrote its
    status and exited in between (seen under load, a 4-instance job whose instance 2 ended
    normally) was named "killed before reporting its exit status"."""
    bootstrap = subprocess.Popen(["true"], start_new_session=True)
    bootstrap.wait()  # reaped: gone, as after a normal exit
    _record(tmp_path, 2, bootstrap.pid)
    groups = Groups(str(tmp_path), [2], os.getpid())
    groups.known[2] = (bootstrap.pid, bootstrap.pid)  # seen alive earlier, as the watchdog does
    exits_read_before = read_exits(str(tmp_path), [2])
    assert exits_read_before == {} and list(vanished(groups, exits_read_before)) == [2]
    with open(status_path(str(tmp_path), 2), "w") as f:  # written, then the bootstrap exited
        f.write("0\n")
    assert list(vanished(groups, exits_read_before)) == []
    groups.close()


def test_a_late_orphan_record_or_an_mpi_notice_names_the_killed_bootstrap(tmp_path):
    """Two instances lost and no program's record of its bootstrap's death yet (under load
    the record waits for the CPU): tied, instance 0 was named. The watchdog waits (bounded)
    for the record, and Open MPI's notice, naming the first rank to end, decides at once;
    when nothing decides, it says so (``unordered_kills`` names them all) rather than guess."""
    dead = []
    for i in (0, 1):
        bootstrap = subprocess.Popen(["true"], start_new_session=True)
        bootstrap.wait()
        _record(tmp_path, i, bootstrap.pid)
        dead.append(bootstrap.pid)
    groups = Groups(str(tmp_path), [0, 1], os.getpid())
    groups.known.update({i: (pid, pid) for i, pid in enumerate(dead)})
    assert killed_first(groups, [0, 1]) == ([0, 1], False)  # nothing tells them apart
    assert killed_first(groups, [0, 1], lambda: 1, 0.0) == ([1, 0], True)  # Open MPI's notice
    started = time.monotonic()
    assert killed_first(groups, [0, 1], lambda: 7, 0.2) == ([0, 1], False)  # none of ours
    assert time.monotonic() - started >= 0.2  # waited its bound for a record, then the tie
    assert killed_first(groups, [1]) == ([1], True)  # one lost: nothing to tell apart

    def record_late() -> None:  # instance 1's program records its bootstrap's death late
        time.sleep(0.3)
        write_atomically(orphaned_path(str(tmp_path), 1), f"{time.time_ns()}\n")

    late = threading.Thread(target=record_late)
    late.start()
    try:
        assert killed_first(groups, [0, 1], None, within(10)) == ([1, 0], True)
    finally:
        late.join()
        groups.close()


def test_kills_nothing_tells_apart_are_named_together_not_guessed():
    line = unordered_kills([1, 0])
    assert line.startswith("instances 0, 1 were killed before reporting their exit status")
    assert "\n" not in line
