"""Checks made before anything is launched: output paths, memory, the collective timeout and
the compute device, each refused in one line naming the value and the fix (exit code 2).

JAX-free (the launcher imports no JAX): the GPU check looks for the device files a CUDA or
ROCm driver creates, and the memory check reads ``MemTotal`` from ``/proc/meminfo``.

References:
    ``proc(5)``, ``/proc/meminfo``: ``MemTotal``, the usable RAM.
    JAX documentation, "GPU memory allocation": ``XLA_PYTHON_CLIENT_PREALLOCATE=false``
    disables the preallocation of 75 % of the GPU memory per process.
"""

from __future__ import annotations

import glob
import os

from contract import (
    DEFAULT_GCL_TIMEOUT_S,
    MAX_TIMEOUT_S,
    MIN_TIMEOUT_S,
    arg_max,
    ascii_seconds,
    output_problem,
    total_memory_bytes,
)
from launch._errors import UsageError
from launch._hosts import short

# Peak resident memory of one instance of examples/train.py (JAX on the CPU, optax, the
# digits data set): 439 MiB measured (getrusage ru_maxrss) on the development machine; a
# smaller JAX program peaks near 270 MiB.
INSTANCE_BYTES = 450 * 2**20
COMPUTE_DEVICES = ("cpu", "gpu")


def collective_timeout(text: str) -> float | None:
    """``--collective-timeout SECONDS``: seconds in ASCII digits from ``MIN_TIMEOUT_S`` to
    ``MAX_TIMEOUT_S`` (``contract.ascii_seconds``; None: unset)."""
    if not text:
        return None
    seconds = ascii_seconds(text)
    if seconds is None:
        raise UsageError(
            f"--collective-timeout {short(text)} is not a number of seconds from "
            f"{MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g} in ASCII digits: write e.g. "
            f"--collective-timeout 60 (default {DEFAULT_GCL_TIMEOUT_S:g})."
        )
    return seconds


def _gpu_present() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")


def compute_device_exports(device: str) -> tuple[tuple[str, str], ...]:
    """The variables that put the instances' JAX compute on ``device``.

    ``cpu`` (the default) pins JAX to the CPU even where a GPU build of JAX is installed, so
    every machine computes the same bits. ``gpu`` lets JAX use the GPU, shared by all the
    instances: XLA's preallocation (75 % of the memory per process) is turned off, else the
    second instance runs out of memory. GPU bits differ from CPU bits (other kernels) but
    stay the same across instance layouts.

    Raises:
        UsageError: ``gpu`` on a machine without a GPU driver.
    """
    if device == "cpu":
        return (("JAX_PLATFORMS", "cpu"),)
    if not _gpu_present():
        raise UsageError(
            "--compute-device gpu: no GPU device (/dev/nvidia*, /dev/kfd) on this machine: "
            "use --compute-device cpu (the default)."
        )
    return (("JAX_PLATFORMS", "gpu"), ("XLA_PYTHON_CLIENT_PREALLOCATE", "false"))


def check_output_dir(flag: str, path: str) -> None:
    """``path`` can safely hold output (popdist_emu._files.output_problem): not a symlink, in
    a directory of this user (or root) that others cannot write (or only as in a sticky /tmp)
    and that takes a new file.

    Raises:
        UsageError: a file where a directory is needed, a symlink, an unsafe directory or
            one where nothing can be created (tried, so that root is refused under /proc).
    """
    if not path:
        return
    full = os.path.abspath(path)
    if os.path.isfile(full) and not os.path.islink(full):
        raise UsageError(f"{flag} {path!r} is a file, not a directory: give a directory path.")
    problem = output_problem(path, directory=True)
    if problem:
        raise UsageError(
            f"{flag} {path!r}: {problem}: pick a directory of your own that you can write to."
        )


def check_memory(num_processes: int, available: int | None = None) -> None:
    """Refuses to start more instances than this machine's memory can hold.

    Compared with the machine's whole memory rather than what is free at this moment: free
    memory comes and goes with other work, and a refusal must never stop a job that fits.

    Args:
        num_processes: instances to start.
        available: bytes of memory; None reads ``MemTotal``.

    Raises:
        UsageError: ``num_processes`` times :data:`INSTANCE_BYTES` exceeds the memory,
            suggesting ``--offline-mode`` (one process, compile only).
    """
    available = total_memory_bytes() if available is None else available
    need = num_processes * INSTANCE_BYTES
    if available is not None and need > available:
        raise UsageError(
            f"--num-instances {num_processes} needs about {need / 2**30:.1f} GiB (about "
            f"{INSTANCE_BYTES // 2**20} MiB per instance) but this machine has "
            f"{available / 2**30:.1f} GiB: use fewer instances, or --offline-mode to compile "
            f"without running."
        )


def check_exec_size(command: list[str], env: dict[str, str]) -> None:
    """Refuses a job whose command and environment the kernel would not exec (E2BIG).

    Linux bounds each word at ``MAX_ARG_STRLEN`` (32 pages) and all of them together at
    ``ARG_MAX``; the job's configuration (``-x`` exports included) travels in one variable.
    """
    words = [*command, *(f"{k}={v}" for k, v in env.items())]
    longest = max(len(w.encode()) for w in words)
    total = sum(len(w.encode()) + 1 + 8 for w in words)  # the word, its NUL and its pointer
    per_word = 32 * os.sysconf("SC_PAGE_SIZE")
    if longest >= per_word or total > arg_max():
        raise UsageError(
            f"the job's environment (-x exports included) needs {total} bytes, one word "
            f"{longest}; the kernel execs at most {arg_max()} in all and {per_word - 1} per "
            f"word: export fewer or shorter variables with -x."
        )
