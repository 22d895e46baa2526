"""A peer that never enters a collective gives gcl.CollectiveTimeout, not a hang; a peer that
returns is reported as gone only from a collective it did not finish."""

from __future__ import annotations

import re
import shutil

import pytest
from gcl_mpi import run_worker

pytestmark = pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs mpiexec")


def test_absent_peer_raises_collective_timeout(tmp_path):
    out = tmp_path / "hang.txt"
    proc = run_worker(2, "hang", str(out), timeout=120)  # the job ends: no hang
    # Instance 0 leaves without MPI_Finalize (its requests are abandoned): MPICH's mpiexec
    # exits 0 for that, Open MPI's prterun reports it as an abnormal termination (exit 1).
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    message = out.read_text()
    assert message.startswith("CollectiveTimeout"), message
    assert "waited past its timeout" in message and "raise `timeout`" in message
    waited = float(re.search(r"after ([0-9.]+) s", message).group(1))
    assert 1.0 <= waited < 10.0


def test_a_peer_that_finished_the_collective_is_not_reported_as_gone(tmp_path):
    """The leaving notice carries how many collectives the leaver ran. A peer still waiting in
    the last of them (its data from the leaver on the way, as under load with 16 instances)
    keeps waiting; in a collective the leaver never ran, the leaver is reported."""
    out = tmp_path / "left.txt"
    proc = run_worker(2, "left", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == "{0: 1} None 0"


def test_a_long_wait_is_recorded_for_the_launcher_and_cleared_when_it_ends(tmp_path):
    """So that when a collective times out, the launcher can tell the instances that waited
    in it from one stuck in its program (tests/launch/test_faults.py names that one)."""
    out = tmp_path / "waiting.txt"
    env = {"GCL_EMU_WAITING_FILE": str(tmp_path / "instance.waiting")}
    proc = run_worker(2, "waiting", str(out), timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == "recorded while waiting: True; after: False"
