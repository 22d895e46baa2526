"""A collective's routes between instances: sends a receiver has yet to acknowledge."""

from __future__ import annotations

import shutil

import pytest
from gcl_mpi import run_worker

pytestmark = pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs mpiexec")


def test_a_receiver_busy_past_the_timeout_after_a_broadcast_is_no_timeout(tmp_path):
    """The receiver has the data and computes for longer than the timeout: the root's send,
    not yet acknowledged, completes at the next collective instead of timing out."""
    out = tmp_path / "busy.txt"
    proc = run_worker(2, "busy", str(out), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == "1.0 1.0 2.0"
