"""MPICH's termination banner is hidden (the launcher names the failure itself); everything
else mpiexec prints passes through unchanged, however the bytes are chunked."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import within
from hypothesis import given, settings
from hypothesis import strategies as st

from launch._mpi_banner import BannerFilter, first_ended

TRAIN = Path(__file__).parents[2] / "examples" / "train.py"
# What Hydra printed here when an instance of a 4-instance job exited with code 2.
BANNER = (
    b"\n"
    b"===================================================================================\n"
    b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    b"=   PID 13497 RUNNING AT vm\n"
    b"=   EXIT CODE: 15\n"
    b"=   CLEANING UP REMAINING PROCESSES\n"
    b"=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
    b"===================================================================================\n"
    b"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Terminated (signal 15)\n"
    b"This typically refers to a problem with your application.\n"
    b"Please see the FAQ page for debugging suggestions\n"
)
# What Open MPI 5's prterun printed here when an instance of a 2-instance job exited with 1.
OPENMPI_NOTICE = (
    b"--------------------------------------------------------------------------\n"
    b"prterun detected that one or more processes exited with non-zero status,\n"
    b"thus causing the job to be terminated. The first process to do so was:\n"
    b"\n"
    b"   Process name: [prterun-vm-20993@1,1]\n"
    b"   Exit code:    1\n"
    b"--------------------------------------------------------------------------\n"
)
lines_st = st.lists(
    st.sampled_from(
        [
            b"[1,0]<stdout>:step 1/2 loss 2.3\n",
            b"\n",
            b"=====\n",
            b"------------------------------\n",
            b"an Open MPI help block's line\n",
            b"== not a banner ==\n",
            b"progress 10%\r",
            b'{"loss": 1.0}\n',
            b"=   a line of a program that starts like the banner's\n",
        ]
    ),
    max_size=12,
)


def _through(data: bytes, cuts: list[int]) -> bytes:
    f, out, at = BannerFilter(), [], 0
    for cut in sorted({min(c, len(data)) for c in cuts}):
        out.append(f.feed(data[at:cut]))
        at = cut
    out.append(f.feed(data[at:]))
    return b"".join(out) + f.flush()


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    before=lines_st,
    after=lines_st,
    cuts=st.lists(st.integers(0, 600), max_size=8),
    notice=st.sampled_from([BANNER, OPENMPI_NOTICE]),
)
def test_the_notices_go_and_everything_else_stays_whatever_the_chunks(before, after, cuts, notice):
    head, tail = b"".join(before), b"".join(after)
    assert _through(head + tail, cuts) == head + tail
    if head and not head.endswith(b"\n"):
        head += b"\n"  # a notice opens on a line of its own
    assert _through(head + notice + tail, cuts) == head + tail


def test_what_was_hidden_is_kept_for_when_the_launcher_cannot_explain():
    f = BannerFilter()
    assert f.feed(b"ok\n" + BANNER + OPENMPI_NOTICE) == b"ok\n"
    assert b"".join(f.hidden) == BANNER + OPENMPI_NOTICE


def test_open_mpis_notice_names_the_rank_that_ended_first_and_mpichs_none():
    """Open MPI's notice names the first failed process by rank; the watchdog uses it to name
    a killed bootstrap when the MPI ended the others before it looked. MPICH's banner gives a
    pid that is not the failed process's (the first local rank's bootstrap, whichever rank
    was killed), so it names none."""
    assert first_ended(OPENMPI_NOTICE.splitlines(keepends=True)) == 1
    killed = b"prterun noticed that process rank 1 with PID 24739 on node vm exited on signal 9"
    assert first_ended([b"\n", killed + b" (Killed).\n"]) == 1
    assert first_ended(BANNER.splitlines(keepends=True)) is None
    assert first_ended([b"[1,0]<stdout>:rank 1 with PID 5\n"]) is None


def test_a_partial_line_passes_at_once():
    f = BannerFilter()
    assert f.feed(b"epoch 1: 10%\r") == b"epoch 1: 10%\r"
    assert f.feed(b"20%") == b"20%"
    assert f.feed(b"\n=====") == b"\n"  # a separator waits for the next line
    assert f.feed(b"\nnot the banner\n") == b"=====\nnot the banner\n"


@pytest.mark.skipif(shutil.which("poprun-emu") is None, reason="poprun-emu is not installed")
def test_a_failed_job_prints_the_programs_error_and_one_line_of_ours(tmp_path):
    """Four instances of a usage error: no banner, the program's error, the launcher's line."""
    for _ in range(3):  # the banner came from a race between mpiexec and the watchdog
        proc = subprocess.run(
            ["poprun-emu", "--num-instances", "4", "--num-replicas", "4", str(TRAIN), "--bogus"],
            capture_output=True,
            text=True,
            timeout=within(120),
            cwd=tmp_path,
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2
        assert "BAD TERMINATION" not in out and "FAQ page" not in out
        assert "unrecognized arguments: --bogus" in out
        ours = [line for line in proc.stderr.splitlines() if line.startswith("poprun-emu:")]
        assert len(ours) == 2 and "exited with code 2" in ours[0], ours


def test_the_filter_imports_nothing_heavy():
    code = "import sys, launch._mpi_banner; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
