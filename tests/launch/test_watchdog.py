"""A failing, killed or interrupted job ends whole, within seconds, naming the instance."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from child_signals import with_default_signals
from deadlines import within

from contract import pid_alive

# Every instance records its pid; instance 1 then fails as told, the others sleep 60 s.
FAILING = """
import os, signal, sys, time
import popdist

instance = popdist.getInstanceIndex()
with open(os.path.join(sys.argv[2], f"pid-{instance}"), "w") as f:
    f.write(f"{os.getpid()} {os.environ['POPDIST_EMU_JOB_DIR']}")
if instance == 1:
    # Fail only once every instance runs, so that there are others to end.
    deadline = time.monotonic() + 30
    while len(os.listdir(sys.argv[2])) < popdist.getNumInstances() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    print("instance 1 gives up", flush=True)
    if sys.argv[1] == "exit":
        sys.exit(3)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
"""


@pytest.fixture
def failing(tmp_path):
    path = tmp_path / "failing.py"
    path.write_text(FAILING)
    pids = tmp_path / "pids"
    pids.mkdir()
    return str(path), pids


def _assert_all_ended(pids, count):
    recorded = [(pids / name).read_text().split() for name in os.listdir(pids)]
    assert len(recorded) == count
    deadline = time.monotonic() + 10
    while any(pid_alive(int(pid)) for pid, _ in recorded) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid, _ in recorded if pid_alive(int(pid))]
    job_dir = recorded[0][1]
    while os.path.exists(job_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(job_dir), "the job directory was left behind"


@pytest.mark.parametrize(
    ("mode", "code", "message"),
    [
        ("exit", 3, "poprun-emu: instance 1 exited with code 3; ended the other instances"),
        ("kill", 128 + 9, "poprun-emu: instance 1 was killed by signal 9 (SIGKILL); ended the"),
    ],
)
def test_a_failing_instance_ends_the_job_in_seconds(poprun, failing, mode, code, message):
    program, pids = failing
    start = time.monotonic()
    result = poprun("--num-replicas=4", "--num-instances=4", program, mode, str(pids), timeout=90)
    elapsed = time.monotonic() - start
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "[1,1]<stdout>:instance 1 gives up" in result.stdout
    assert elapsed < within(30), f"the job took {elapsed:.1f} s to end"  # the others sleep 60 s
    _assert_all_ended(pids, 4)


def _start_sleeping_job(failing, tmp_path):
    """Starts a 2-instance job whose instances sleep; returns it once both are running."""
    program, pids = failing
    script = shutil.which("poprun-emu")
    command = [script] if script else [sys.executable, "-m", "launch"]
    launcher = subprocess.Popen(
        # SIGINT's default disposition, also when the suite runs in the background.
        with_default_signals(
            [*command, "--num-replicas=2", "--num-instances=2", program, "sleep", str(pids)],
            signal.SIGINT,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while len(os.listdir(pids)) < 2 and time.monotonic() < deadline and launcher.poll() is None:
        time.sleep(0.1)
    time.sleep(0.3)  # let the last pid file be complete
    return launcher


def test_ctrl_c_ends_the_whole_job(failing, tmp_path):
    _, pids = failing
    launcher = _start_sleeping_job(failing, tmp_path)
    try:
        assert len(os.listdir(pids)) == 2, "the instances did not start"
        start = time.monotonic()
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=within(30))
        assert time.monotonic() - start < within(15)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=within(10))
    assert launcher.returncode == 130
    assert "poprun-emu: interrupted; ended all instances" in err
    _assert_all_ended(pids, 2)


def test_instances_end_when_the_launcher_is_killed(failing, tmp_path):
    """A test harness's timeout SIGKILLs poprun-emu only; its instances must not live on."""
    _, pids = failing
    launcher = _start_sleeping_job(failing, tmp_path)
    try:
        assert len(os.listdir(pids)) == 2, "the instances did not start"
    finally:
        launcher.kill()
        launcher.communicate(timeout=within(30))
    _assert_all_ended(pids, 2)


def test_an_mpiexec_that_fails_to_start_is_reported(poprun, failing, tmp_path):
    """An mpiexec that ends before starting any instance (an option Hydra refuses is now
    caught before launch, so a stand-in mpiexec that fails at once plays it)."""
    program, pids = failing
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmpi.so.12").write_bytes(b"\x7fELF")  # never loaded
    mpiexec = tmp_path / "bin" / "mpiexec"
    mpiexec.write_text("#!/bin/sh\necho 'mpiexec: cannot start' >&2\nexit 3\n")
    mpiexec.chmod(0o755)
    result = poprun(f"--mpiexec={mpiexec}", program, "exit", str(pids))
    assert result.returncode == 3, result.stderr
    assert "poprun-emu: mpiexec exited with code 3" in result.stderr
    assert "instances [0] reported no exit status" in result.stderr


def test_a_program_that_cannot_start_is_reported(poprun, tmp_path):
    program = tmp_path / "broken"
    program.write_text("#!/no/such/interpreter\n")
    program.chmod(0o755)
    result = poprun(str(program))
    assert result.returncode == 127
    assert "[1,0]<stderr>:poprun-emu: cannot start" in result.stderr
    assert "poprun-emu: instance 0 exited with code 127" in result.stderr
