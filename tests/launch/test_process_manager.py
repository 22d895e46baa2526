"""A killed mpiexec or MPI process manager (MPICH's hydra_pmi_proxy), or a stopped bootstrap,
ends the job at once.

mpiexec does not exit when its proxy is killed: it keeps waiting on the proxy's connections
while the instances run on, orphaned, and the job used to end only when the programs did
(16.9 s later in a red-team run). Each bootstrap now watches its parent and ends its program;
the launcher ends the instances as soon as mpiexec itself is gone.
"""

import os
import signal
import subprocess
import time

import pytest
from deadlines import within

LAYOUT = ("poprun-emu", "--num-replicas", "2", "--num-instances", "2")
LONG = (
    "import os, time\n"
    "print('started', os.environ['POPDIST_EMU_INSTANCE_INDEX'], os.getpid(), flush=True)\n"
)


def _sleeping_job(cwd) -> subprocess.Popen:
    """Two instances that print "started RANK PID" and sleep 120 s."""
    (cwd / "long.py").write_text(LONG + "time.sleep(120)\n")
    return subprocess.Popen(
        [*LAYOUT, "--collective-timeout", "3", "long.py"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize(
    ("generations", "name", "sig", "words"),
    [
        (2, b"hydra_pmi_proxy", signal.SIGKILL, "the MPI process manager of instance"),
        (3, b"mpiexec", signal.SIGKILL, "mpiexec was killed by signal 9"),
        # A stopped bootstrap used to end the job only after its program's work plus the
        # timeout (61-66 s after the stop with --collective-timeout 10).
        (1, b"python", signal.SIGSTOP, "was stopped (SIGSTOP or a debugger) for over 3 s"),
    ],
)
def test_a_killed_process_manager_or_mpiexec_or_a_stopped_bootstrap_ends_the_job_at_once(
    tmp_path, generations, name, sig, words
):
    job = _sleeping_job(tmp_path)
    try:
        victim = int(job.stdout.readline().split()[-1])  # "[1,i]<stdout>:started PID"
        for _ in range(generations):  # program -> bootstrap -> proxy -> mpiexec
            victim = _parent(victim)
        with open(f"/proc/{victim}/cmdline", "rb") as f:
            assert os.path.basename(f.read().split(b"\0")[0]).startswith(name)
        killed = time.monotonic()
        os.kill(victim, sig)
        _, err = job.communicate(timeout=within(60))
        seconds = time.monotonic() - killed
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode != 0 and seconds < within(30), (seconds, err)  # the program runs 120 s
    assert words in err, err
