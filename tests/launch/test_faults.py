"""Fault injection through poprun-emu: every fault ends the whole job, names the instance,
and leaves no process and no shared-memory segment behind (issue 14's table).

Two instances of a small gcl program (tests/launch/fault_program.py); instance 1 fails. The
subprocess timeout is generous; how fast each fault ends the job is measured by
benchmarks/faults.py, not asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from deadlines import within

from contract import pid_alive

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_program.py")
LAYOUT = ("--num-replicas", "2", "--num-instances", "2")

# case -> (launcher exit code, text that names the failing instance)
EXPECTED = {
    "before": (1, "instance 1 exited with code 1"),
    "during": (1, "instance 1 exited with code 1"),
    "inside": (1, "instance 1 exited with code 1"),
    "after": (1, "instance 1 exited with code 1"),
    "exit": (1, "poprun-emu: instance 1 returned from its program (exit code 0) while instance 0"),
    # The leaver's own code and name, not its waiting peer's (launch._runner).
    "exit3": (3, "instance 1 exited with code 3; ended the other instances"),
    "extra": (1, "poprun-emu: instance 1 returned from its program (exit code 0) while instance 0"),
    "kill": (137, "instance 1 was killed by signal 9 (SIGKILL)"),
    "stop": (1, "instance 1 was stopped"),
    "stopboot": (1, "instance 1 was stopped"),
    # The stuck one, not the peer whose collective timed out waiting for it.
    "sleep": (1, "instance(s) 1 never reached the collective that instance 0 waited in"),
    "spin": (1, "instance(s) 1 never reached the collective that instance 0 waited in"),
    "loader": (1, "instance(s) 1 never reached the collective that instance 0 waited in"),
}
TIMEOUT_CASES = ("stop", "stopboot", "sleep", "spin", "loader")  # end at --collective-timeout


def _assert_nothing_left(out):
    records = [json.loads((out / f"instance-{i}.json").read_text()) for i in (0, 1)]
    deadline = time.monotonic() + 10
    pids = [r["pid"] for r in records]
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if pid_alive(p)], "instances outlived the job"
    segments = {s for r in records for s in r["segments"] if s.startswith("/dev/shm/")}
    assert segments, "the instances mapped no MPI segment: the check would be empty"
    assert not [s for s in segments if os.path.exists(s)], "shared memory outlived the job"


def _run(poprun, tmp_path, case, *options):
    out = tmp_path / case
    out.mkdir()
    words = [*options, *LAYOUT]
    if case in TIMEOUT_CASES:
        words += ["--collective-timeout", "3"]
    return poprun(*words, PROGRAM, case, str(out), timeout=240), out


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_a_fault_ends_the_job_naming_the_instance(poprun, tmp_path, case):
    result, out = _run(poprun, tmp_path, case)
    code, names = EXPECTED[case]
    assert result.returncode == code, result.stderr[-3000:]
    assert names in result.stderr, result.stderr[-3000:]
    if case in ("before", "during", "inside", "after"):
        # The instance printed its traceback (tagged): once, with no recap repeating it.
        assert result.stderr.count("RuntimeError: injected fault") == 1, result.stderr[-3000:]
        assert "[1,1]<stderr>:RuntimeError: injected fault" in result.stderr
        assert "last lines of instance 1's stderr" not in result.stderr
    _assert_nothing_left(out)


def test_a_silenced_instance_s_failure_still_shows_its_last_lines(poprun, tmp_path):
    result, out = _run(poprun, tmp_path, "during", "--only-output-from-instance", "0")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "instance 1 exited with code 1" in result.stderr
    assert "last lines of instance 1's stderr" in result.stderr  # it printed none itself
    assert "RuntimeError: injected fault between collectives" in result.stderr
    assert "[1,1]" not in result.stderr  # the instance itself stayed silent
    _assert_nothing_left(out)


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "not a number of seconds"), ("-3", "not a number of seconds"), ("x", "e.g.")],
)
def test_a_bad_collective_timeout_is_refused_before_launch(poprun, tmp_path, value, message):
    result = poprun("--collective-timeout", value, PROGRAM, "during", str(tmp_path))
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.splitlines()) == 1


FORGER = """
import os, sys, time
job = os.environ["POPDIST_EMU_JOB_DIR"]
index = os.environ["POPDIST_EMU_INSTANCE_INDEX"]
victim = int(sys.argv[1])
with open(os.path.join(job, f"instance-{index}.pid"), "w") as f:
    f.write(f"{victim} {victim}\\n")  # a process group the launcher did not start
time.sleep(1.5)
sys.exit(3)
"""


def test_the_launcher_signals_only_process_groups_it_started(poprun, tmp_path):
    program = tmp_path / "forger.py"
    program.write_text(FORGER)
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        result = poprun(*LAYOUT, str(program), str(bystander.pid), timeout=240)
        assert result.returncode == 3, result.stderr[-3000:]
        assert "exited with code 3" in result.stderr
        assert bystander.poll() is None, "the launcher signalled a forged process group"
    finally:
        bystander.kill()
        bystander.wait(timeout=within(30))


def test_an_instance_that_returns_before_its_first_collective_ends_the_job(poprun, tmp_path):
    started = time.monotonic()
    result = poprun("--collective-timeout", "4", *LAYOUT, PROGRAM, "early", str(tmp_path))
    assert result.returncode == 1, result.stderr[-3000:]
    # MPICH: the launcher ends the job; Open MPI's mpiexec ends it first (SIGTERM), and the
    # launcher still names the instance that returned.
    assert "instance 1 exited with code 0" in result.stderr, result.stderr[-3000:]
    assert time.monotonic() - started < within(60)  # it ended by itself, at the collective timeout


def test_a_collective_timeout_exported_with_x_is_checked_before_launch(poprun, tmp_path):
    result = poprun("--mpi-global-args=-x GCL_EMU_TIMEOUT=soon", PROGRAM, "during", str(tmp_path))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "GCL_EMU_TIMEOUT='soon' is not a number of seconds in ASCII digits" in result.stderr


def test_offline_instances_may_end_apart(poprun, tmp_path):
    """Offline instances call no collective: one compiling longer than the collective timeout
    after the others have returned is not a hang."""
    (tmp_path / "slow.py").write_text(
        "import time, popdist\nif popdist.getInstanceIndex() == 0:\n    time.sleep(4)\n"
    )
    result = poprun("--offline-mode", "--collective-timeout", "1", *LAYOUT, "slow.py")
    assert result.returncode == 0, result.stderr[-3000:]


KILL_MPIEXEC = """
import os, signal, sys, time, popdist
def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
def name(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()
with open(sys.argv[1] + f".{popdist.getInstanceIndex()}", "w") as f:
    f.write(str(os.getpid()))
time.sleep(1)  # both instances have recorded their pid
if popdist.getInstanceIndex() == 0:
    pid = os.getpid()
    while pid > 1 and not name(pid).startswith("mpiexec"):
        pid = parent(pid)
    os.kill(pid, signal.SIGKILL)
time.sleep(60)
"""


def test_a_killed_mpiexec_gives_128_plus_the_signal_and_leaves_no_instance(poprun, tmp_path):
    (tmp_path / "kill_mpiexec.py").write_text(KILL_MPIEXEC)
    pids = tmp_path / "pid"
    result = poprun(*LAYOUT, "kill_mpiexec.py", str(pids), timeout=120)
    assert result.returncode == 137, result.stderr[-3000:]  # PopRun's 128 + SIGKILL, not 247
    assert "mpiexec was killed by signal 9 (SIGKILL)" in result.stderr
    programs = [int((tmp_path / f"pid.{i}").read_text()) for i in (0, 1)]
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in programs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in programs if pid_alive(p)], "instances outlived their mpiexec"
