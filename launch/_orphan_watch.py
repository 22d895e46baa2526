"""Tells the launcher at once when an instance's bootstrap dies under its running program.

A bootstrap killed from outside (``kill -9``) leaves its program running, orphaned, and the
MPI's process manager then kills the job's other instances, bootstraps and programs alike,
often before the launcher's watchdog next looks: every instance is then gone without a status,
and nothing in ``/proc`` tells which bootstrap died first. The program learns it the moment it
happens: the kernel sends it a parent-death signal (``PR_SET_PDEATHSIG``), which a thread of
its own waits for (``sigwait``), and writes the time to ``instance-<i>.orphaned`` in the job
directory. The earliest such record names the instance whose bootstrap was killed.

The signal must be blocked in every thread of the program, or one that does not block it
(a thread a library started at import, such as NumPy's BLAS pool) takes it with its default
action, which ends the process. So the bootstrap starts the program with the signal blocked
(``death_signal_blocked``): its first thread inherits the mask, and every thread after it.

References:
    Linux ``prctl(2)``: ``PR_SET_PDEATHSIG`` (the signal arrives when the parent thread that
    created the process ends; re-check ``getppid()`` after setting it, for a parent that died
    before). Python documentation, ``signal.pthread_sigmask`` and ``signal.sigwait``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

from contract import InstanceEnvironment, orphaned_path, read_pid_file, write_atomically

_PR_SET_PDEATHSIG = 1
# A real-time signal: none of a program's usual ones, and never merged with another.
DEATH_SIGNAL = signal.SIGRTMIN + 2


@contextlib.contextmanager
def death_signal_blocked() -> Iterator[None]:
    """Blocks the parent-death signal in the calling thread while a program is started in it:
    the program inherits the mask, and so does every thread it starts."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {DEATH_SIGNAL})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _record(view: InstanceEnvironment) -> None:
    with contextlib.suppress(OSError):  # the job directory is gone: the job has ended
        write_atomically(orphaned_path(view.job_dir, view.instance), f"{time.time_ns()}\n")


def watch_bootstrap(view: InstanceEnvironment) -> None:
    """Records the death of this process's parent (the bootstrap) while the program runs.

    Does nothing outside the launcher, where no parent-death signal exists (not Linux), when
    the C library cannot be loaded, or when the signal was not blocked from the start.
    """
    if not view.job_dir or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return
    bootstrap = _bootstrap_pid(view)
    if bootstrap is None or DEATH_SIGNAL not in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
        return  # not started blocked by a bootstrap: the signal could end the program
    if libc.prctl(_PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0) != 0:
        return

    def wait() -> None:
        signal.sigwait({DEATH_SIGNAL})
        _record(view)

    threading.Thread(target=wait, name="poprun-emu bootstrap watch", daemon=True).start()
    if os.getppid() != bootstrap:  # died before the signal was armed
        _record(view)


def _bootstrap_pid(view: InstanceEnvironment) -> int | None:
    """The bootstrap's pid, from the pid file it wrote before starting this program."""
    record = read_pid_file(view.job_dir, view.instance)
    return None if record is None else record[0]
