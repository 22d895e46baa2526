"""Job directories of killed launchers are removed at the next start, and nothing else is."""

import os
import signal
import subprocess
import sys
import time

from deadlines import within
from zombies import zombie

from launch._job import pid_space
from launch._stale import OWNER_FILE, claim, sweep_stale


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _job_dir(root, name, owner=None, bootstrap=None):
    path = root / name
    path.mkdir()
    if owner is not None:
        (path / OWNER_FILE).write_text(owner)
    if bootstrap is not None:
        (path / "instance-0.pid").write_text(f"{bootstrap} {bootstrap}\n")
    return path


def test_only_directories_whose_launcher_and_bootstraps_are_gone_are_removed(tmp_path):
    dead, space = _dead_pid(), pid_space()
    stale = _job_dir(tmp_path, "poprun-emu-stale", f"{dead} {space}\n", bootstrap=_dead_pid())
    running = _job_dir(tmp_path, "poprun-emu-running", f"{os.getpid()} {space}\n")
    orphan = _job_dir(tmp_path, "poprun-emu-orphan", f"{dead} {space}\n", bootstrap=os.getpid())
    elsewhere = _job_dir(tmp_path, "poprun-emu-other-space", f"{dead} 0:0\n")
    unowned = _job_dir(tmp_path, "poprun-emu-unowned")
    other = _job_dir(tmp_path, "not-ours", f"{dead} {space}\n")
    assert sweep_stale(str(tmp_path)) == [str(stale)]
    assert not stale.exists()
    for kept in (running, orphan, elsewhere, unowned, other):
        assert kept.exists(), kept


def test_a_directory_whose_launcher_and_bootstrap_are_zombies_is_removed(tmp_path):
    """A killed launcher or bootstrap stays a zombie until its parent reaps it (perhaps
    never): ``kill(pid, 0)`` reaches a zombie, and the directory was kept."""
    launcher, bootstrap = zombie(), zombie()
    try:
        stale = _job_dir(tmp_path, "poprun-emu-z", f"{launcher.pid} {pid_space()}\n", bootstrap.pid)
        assert sweep_stale(str(tmp_path)) == [str(stale)]
    finally:
        launcher.wait(timeout=within(10))
        bootstrap.wait(timeout=within(10))


def test_a_claimed_directory_names_this_launcher_and_is_kept_while_it_runs(tmp_path):
    job = tmp_path / "poprun-emu-mine"
    job.mkdir()
    claim(str(job))
    assert (job / OWNER_FILE).read_text() == f"{os.getpid()} {pid_space()}\n"
    assert sweep_stale(str(tmp_path)) == [] and job.exists()


def test_the_next_launch_sweeps_what_a_whole_job_sigkill_left(poprun, tmp_path):
    """A whole-job SIGKILL leaves the launcher no chance to clean up (4 of 4 runs left the
    directory); the next poprun-emu of the same user removes it with a one-line note."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    (tmp_path / "sleep.py").write_text("import time\ntime.sleep(600)\n")
    env = {**os.environ, "TMPDIR": str(temporary)}
    job = subprocess.Popen(
        ["poprun-emu", "--num-replicas", "1", "sleep.py"],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (pids := list(temporary.glob("poprun-emu-*/instance-0.pid"))):
            assert time.monotonic() < deadline, "the instance never started"
            time.sleep(0.1)
        # Everything at once: the bootstrap's group (it and the program), then the launcher.
        os.killpg(int(pids[0].read_text().split()[1]), signal.SIGKILL)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=within(60))
    (left,) = temporary.glob("poprun-emu-*")
    (tmp_path / "quick.py").write_text("pass\n")
    deadline = time.monotonic() + 60
    while True:  # until the killed processes are reaped and gone
        result = poprun("--num-replicas", "1", "quick.py", env={"TMPDIR": str(temporary)})
        if not left.exists() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert result.returncode == 0, result.stderr
    assert not left.exists()
    assert f"removed 1 job directory of launchers no longer running: {left}" in result.stderr
    assert list(temporary.iterdir()) == []
