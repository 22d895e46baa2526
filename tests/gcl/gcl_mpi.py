"""Run the MPI worker of the gcl tests under mpiexec, always with a timeout."""

from __future__ import annotations

import os
import subprocess
import sys

from deadlines import within

from launch._placement import mpi_launch

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gcl_worker.py")


def run_worker(
    instances: int, *args: str, timeout: float = 180, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``mpiexec -n instances python gcl_worker.py args`` with a timeout, output captured."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env or {}))
    # ``python -m mpi4py`` aborts the whole job on an exception in any rank, so a failing
    # rank cannot leave the others waiting until the timeout.
    # The MPI poprun-emu uses (POPDIST_EMU_MPIEXEC selects a system one), with the flags it
    # needs as root and oversubscribed.
    cmd, extra = mpi_launch(instances, [sys.executable, "-m", "mpi4py", WORKER, *args], env)
    env.update(extra)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=within(timeout), env=env)
