"""Where the instances run: offline-mode capacity, real hosts, and the system MPI's library.

- Offline mode starts every instance PopRun would start (each compiles, none runs), so host
  code that communicates across instances works. Each offline instance imports JAX and
  compiles the step; this machine holds only so many of them, so past a bound set by its CPUs
  and free memory one representative instance (instance 0 of the full layout) stands for all
  of them: the instances are symmetric, so one compile tells what every one would.
- ``--real-hosts`` hands the ``-H`` hosts to the MPI in use (Hydra's ``-hosts h:k,...``, Open
  MPI's ``--host h:k,...``), ``k`` consecutive instances per host as PopRun divides them.
- A system MPI is named by its ``mpiexec``; mpi4py is pointed at the matching ``libmpi``
  through ``MPI4PY_LIBMPI``.

References:
    PopRun/PopDist User Guide, "Overview" (``--offline-mode``, ``-H``: "The instances are
    divided evenly among the hosts"); MPICH Hydra ``mpiexec -help`` (``-hosts``); Open MPI
    ``mpirun(1)`` (``--host host:slots``); mpi4py 4 documentation, "Environment variables"
    (``MPI4PY_LIBMPI``).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence

from contract import ENV_LIBMPI, ENV_MPI4PY_LIBMPI, ENV_MPIEXEC, available_memory_bytes
from launch._errors import UsageError

# One offline instance (Python, JAX, XLA compiling a small step) was measured at about
# 0.4-0.6 GB resident on this project's 2-core machine; 768 MiB leaves headroom.
OFFLINE_INSTANCE_BYTES = 768 * 2**20
# Instances per CPU before start-up (JAX import and compile, about 2 s of CPU each) makes an
# offline run slower than its single representative by more than a few times.
OFFLINE_INSTANCES_PER_CPU = 4


def offline_capacity() -> int:
    """How many offline instances this machine holds at once (at least 1)."""
    cpus = len(os.sched_getaffinity(0))
    return max(
        1, min(cpus * OFFLINE_INSTANCES_PER_CPU, available_memory_bytes() // OFFLINE_INSTANCE_BYTES)
    )


def hosts_argument(flavour: str, hosts: Sequence[str], per_host: int) -> list[str]:
    """mpiexec words that place ``per_host`` consecutive instances on each host, in order."""
    listed = ",".join(f"{h}:{per_host}" for h in hosts)
    if flavour == "openmpi":
        return ["--host", listed, "--map-by", "slot"]
    return ["-hosts", listed]


def find_libmpi(mpiexec: str, explicit: str, environ: Mapping[str, str]) -> str:
    """The libmpi shared library of the MPI whose launcher is ``mpiexec``.

    ``explicit`` (``--libmpi``) or ``POPDIST_EMU_LIBMPI`` wins; otherwise the real library in
    ``<prefix>/lib`` (``<prefix>/bin/mpiexec``), skipping linker scripts such as the Open MPI
    wheel's ``libmpi.so`` (``INPUT(libmpi.so.40)``), which cannot be loaded.

    Raises:
        UsageError: a named library that does not exist, or none found beside mpiexec.
    """
    named = explicit or environ.get(ENV_LIBMPI, "")
    if named:
        if not os.path.isfile(named):
            raise UsageError(
                f"--libmpi {named!r} does not exist: give the path of the MPI's libmpi.so.N."
            )
        return os.path.abspath(named)
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(mpiexec)))
    for pattern in ("lib/libmpi.so.*", "lib64/libmpi.so.*", "lib/*/libmpi.so.*"):
        for path in sorted(glob.glob(os.path.join(prefix, pattern)), key=len):
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    return path
    raise UsageError(
        f"no libmpi.so.N beside {mpiexec} (looked in {prefix}/lib): name it with --libmpi "
        f"PATH (mpi4py loads it through MPI4PY_LIBMPI)."
    )


def mpi_launch(
    num_processes: int, program: Sequence[str], environ: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """``(command, extra environment)`` to run ``program`` as ``num_processes`` MPI ranks on
    this machine with the MPI poprun-emu would use (``POPDIST_EMU_MPIEXEC`` or the embedded
    wheel), with the flags that MPI needs as root and oversubscribed, and ``MPI4PY_LIBMPI``
    for a named system MPI. For tools and tests that start MPI jobs without the launcher.
    """
    from launch._mpi import find_mpiexec, mpi_flavour, mpiexec_command

    environ = os.environ if environ is None else environ
    mpiexec = find_mpiexec(environ)
    extra = {}
    if environ.get(ENV_MPIEXEC) or environ.get(ENV_LIBMPI):
        extra[ENV_MPI4PY_LIBMPI] = find_libmpi(mpiexec, "", environ)
    command = mpiexec_command(
        mpiexec,
        mpi_flavour(mpiexec),
        num_instances=num_processes,
        global_args=(),
        local_args=(),
        bootstrap=program,
        is_root=os.geteuid() == 0,
    )
    return command, extra
