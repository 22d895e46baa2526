"""What the launcher and the bootstraps share: the job config, its files, an instance's env.

The launcher passes the job to every bootstrap as JSON in one variable (never as a shell
string); each bootstrap writes two small files into the job directory, which the watchdog
polls: ``instance-<i>.pid`` (``"<pid> <process group>"``, when it starts) and
``instance-<i>.status`` (the program's ``Popen.returncode``, when it ends).
"""

import os
from collections.abc import Mapping

from hardware import ReplicaLayout
from popdist_emu._files import write_atomically as write_atomically

CONFIG_VARIABLE = "POPDIST_EMU_BOOTSTRAP"
SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")
# XLA has no intra_op_parallelism_threads flag (a bare word in XLA_FLAGS is read as a file
# name, and "--intra_op_parallelism_threads" is refused as unknown): its CPU thread pool is
# sized from the CPUs the process may use, which the bootstrap pins to one.
_SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false"


def pid_path(job_dir: str, instance: int) -> str:
    """Where instance ``instance`` records its pid and process group."""
    return os.path.join(job_dir, f"instance-{instance}.pid")


def status_path(job_dir: str, instance: int) -> str:
    """Where instance ``instance`` records its program's exit status."""
    return os.path.join(job_dir, f"instance-{instance}.status")


def instance_environment(
    config: Mapping[str, object], instance: int, environ: Mapping[str, str]
) -> dict[str, str]:
    """The full environment of the program of ``instance``: PopRun's plus the emulator's."""
    layout = ReplicaLayout(**{**config["layout"], "hosts": tuple(config["layout"]["hosts"])})
    env = {k: v for k, v in environ.items() if k != CONFIG_VARIABLE}
    env.update(dict(config.get("exports", ())))
    env.update(layout.instance_environment(instance))
    env.update(
        POPDIST_EMU_SYSTEM=str(config.get("system", "")),
        POPDIST_EMU_REPORT_DIR=str(config.get("report_dir", "")),
        POPDIST_EMU_OFFLINE="1" if config.get("offline") else "0",
        POPDIST_EMU_JOB_DIR=str(config["job_dir"]),
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {_SINGLE_THREAD_XLA}".strip()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SHIM_DIR, env.get("PYTHONPATH")) if p)
    # Lines reach the launcher as they are printed, and survive a watchdog SIGTERM.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
