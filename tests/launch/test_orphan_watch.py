"""launch._orphan_watch: a program whose bootstrap dies under it records the moment at once,
so the launcher can name the instance whose bootstrap was killed; a bootstrap that outlives
its program leaves no record. Real processes: a stand-in bootstrap runs the runner."""

import os
import signal
import subprocess
import sys
import time

import pytest
from deadlines import within

# A stand-in bootstrap: starts the runner on a script, prints the program's pid, and either
# waits for it (the normal end) or sleeps until killed.
BOOTSTRAP = (
    "import os, subprocess, sys, time\n"
    "from launch._orphan_watch import death_signal_blocked\n"
    "with open(os.path.join(os.environ['POPDIST_EMU_JOB_DIR'], 'instance-0.pid'), 'w') as f:\n"
    "    f.write(f'{os.getpid()} {os.getpgrp()}')\n"
    "with death_signal_blocked():  # as launch._bootstrap starts the program\n"
    "    child = subprocess.Popen([sys.executable, '-m', 'launch._runner', sys.argv[1]])\n"
    "print(child.pid, flush=True)\n"
    "child.wait() if sys.argv[2] == 'wait' else time.sleep(60)\n"
)


def _bootstrap(tmp_path, script: str, mode: str) -> tuple[subprocess.Popen, int]:
    (tmp_path / "program.py").write_text(script)
    job = tmp_path / "job"
    job.mkdir()
    env = {**os.environ, "POPDIST_EMU_JOB_DIR": str(job), "POPDIST_EMU_INSTANCE_INDEX": "0"}
    boot = subprocess.Popen(
        [sys.executable, "-c", BOOTSTRAP, str(tmp_path / "program.py"), mode],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    return boot, int(boot.stdout.readline())


def test_a_killed_bootstrap_is_recorded_by_its_program_at_once(tmp_path):
    script = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"
    boot, program = _bootstrap(tmp_path, script, "sleep")
    record = tmp_path / "job" / "instance-0.orphaned"
    try:
        assert boot.stdout.readline() == "ready\n"  # the program is running its script
        killed = time.time_ns()
        boot.kill()
        boot.wait()
        deadline = time.monotonic() + within(10)
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert record.exists()
        assert int(record.read_text()) >= killed
        os.kill(program, 0)  # the program itself runs on: the launcher ends it
    finally:
        os.kill(program, signal.SIGKILL)


@pytest.mark.parametrize("status", [0, 3])
def test_a_program_that_ends_first_leaves_no_record_and_its_status(tmp_path, status):
    boot, _ = _bootstrap(tmp_path, f"import sys\nsys.exit({status})\n", "wait")
    assert boot.wait(timeout=within(60)) == 0
    assert not (tmp_path / "job" / "instance-0.orphaned").exists()
