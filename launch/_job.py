"""What the launcher and the bootstraps share: the job's files and an instance's environment.

The launcher passes the job to every bootstrap as a :class:`~contract.JobConfig`
in JSON, in one variable (never as a shell string); each bootstrap writes two small files into
the job directory, which the watchdog polls: ``instance-<i>.pid`` (``"<pid> <process group>"``,
when it starts, its modification time renewed every :data:`HEARTBEAT_SECONDS` while the program
runs) and ``instance-<i>.status`` (the program's ``Popen.returncode``, when it ends).
The variable names themselves live in ``contract``, the JAX-free package both sides import.
"""

import os
from collections.abc import Mapping, Sequence

from contract import ENV_BOOTSTRAP, JobConfig
from contract import leaving_path as leaving_path
from contract import pid_path as pid_path
from contract import status_path as status_path
from contract import waiting_path as waiting_path
from contract import write_atomically as write_atomically

# How often a bootstrap renews its pid file's modification time: the launcher's only sign of
# life from an instance on another host, whose processes it cannot see.
HEARTBEAT_SECONDS = 0.5

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")
# XLA has no intra_op_parallelism_threads flag (a bare word in XLA_FLAGS is read as a file
# name, and "--intra_op_parallelism_threads" is refused as unknown): its CPU thread pool is
# sized from the CPUs the process may use, which the bootstrap pins to one.
_SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false"


def instance_environment(
    config: JobConfig, instance: int, environ: Mapping[str, str]
) -> dict[str, str]:
    """The full environment of the program of ``instance``: PopRun's plus the emulator's.

    The job's variables come from ``config.instance_variables``; this adds what makes the
    process an instance on this machine: one-threaded XLA and BLAS, and the ``popdist`` shim
    on ``PYTHONPATH``.
    """
    env = {k: v for k, v in environ.items() if k != ENV_BOOTSTRAP}
    env.update(config.instance_variables(instance))
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {_SINGLE_THREAD_XLA}".strip()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SHIM_DIR, env.get("PYTHONPATH")) if p)
    # Lines reach the launcher as they are printed, and survive a watchdog SIGTERM.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def pid_space() -> str:
    """Which process-id space this process is in: the kernel's boot id and the pid
    namespace, so that a bootstrap on another host (or in another container) never reads
    the launcher's pid as one of its own processes; empty where neither can be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def waiting_in_collectives(job_dir: str, instances: Sequence[int]) -> set[int]:
    """The instances whose gcl recorded a wait of over a second in a collective that has not
    ended (timed out, or still waiting)."""
    return {i for i in instances if os.path.exists(waiting_path(job_dir, i))}


def peer_left(job_dir: str, instance: int) -> tuple[int, str] | None:
    """``(instance that returned, collective)`` when gcl in ``instance`` stopped waiting in a
    collective because that peer had returned from its program (``gcl.PeerLeft``)."""
    try:
        with open(waiting_path(job_dir, instance)) as f:
            words = f.read().split()
    except OSError:
        return None
    if len(words) == 4 and words[2] == "left" and words[3].isdigit():
        return int(words[3]), words[1]
    return None
