"""How a child process is started, watched and ended: one owner for all three.

A launcher starts what it waits on (mpiexec, the ``--calibrate-from`` refit, a scaling
series) in a session of its own, so that everything the child starts can be ended with it,
and ends it on Ctrl-C, SIGTERM and SIGHUP as on its own failure. :func:`start_session` starts
such a child with those signals deferred until the caller holds its handle, and
:func:`ending_signals_interrupt` makes SIGTERM and SIGHUP raise as Ctrl-C does, so that one
``except KeyboardInterrupt`` ends the child whichever of them came.

A process that has exited stays a zombie until its parent reaps it, and ``kill(pid, 0)``
succeeds on a zombie: a killed bootstrap whose parent (MPICH's ``hydra_pmi_proxy``) reaps it
only when its orphaned program ends, a launcher killed with its job (reaped by whoever
started it, perhaps never), a checkpoint's owner killed under a parent that does not wait.
So :func:`pid_alive` reads the state ``/proc`` gives (``Z`` or ``X``: ended), and asks
``kill(pid, 0)`` only where ``/proc`` does not show the process (no ``/proc``, or a mount
that hides other users' processes). Every check of a pid in the project (the launcher's
watchdog, the sweep of stale job directories, a checkpoint directory's owner, the
temporaries of killed writers) goes through it. JAX-free, so the launcher may use it.

References:
    Python documentation, ``signal.signal`` (handlers run in the main thread, between
    bytecodes), ``signal.raise_signal`` and ``subprocess.Popen``'s ``start_new_session`` and
    ``preexec_fn`` ("not safe to use in the presence of threads": a child forked to run it
    can deadlock, so it is not used). Linux ``execve(2)``: caught signals are reset to their
    default in the new program, ignored ones stay ignored. Linux ``proc(5)``:
    ``/proc/<pid>/stat`` (state, ppid, pgrp, session after the command name in parentheses);
    "Z  Zombie", "X  Dead". ``kill(2)``: "If sig is 0, then no signal is sent, but existence
    and permission checks are still performed".
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that end a launcher, and with it what it started: Ctrl-C, ``kill`` and a
closed terminal."""


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, parent, process
    group, session, ...); None if ``/proc`` does not show ``pid``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > 3 else None


def has_ended(fields: list[str]) -> bool:
    """Whether the state in ``/proc/<pid>/stat`` fields (:func:`stat_fields`) says the
    process has ended: a zombie ("Z") waiting to be reaped, or one being removed ("X")."""
    return fields[0] in ("Z", "X")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs: it exists and has not ended (a zombie has).

    Where ``/proc`` does not show it, ``kill(pid, 0)`` decides: a process we may not signal
    counts as alive. A pid below 1 names no process (``kill`` would read it as a group).
    """
    if pid < 1:
        return False
    fields = stat_fields(pid)
    if fields is not None:
        return not has_ended(fields)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_process_group(process: subprocess.Popen, grace_s: float) -> int:
    """Ends ``process``, started with ``start_new_session=True``, and everything in its
    process group: SIGTERM (a launcher among them ends its own job), SIGKILL to whatever
    outlives ``grace_s``; returns its exit code. Every wait is bounded by ``grace_s``.

    Raises:
        subprocess.TimeoutExpired: the process was not reaped ``grace_s`` after SIGKILL (a
            process stuck in the kernel).
    """
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:  # the group is empty: the process has been reaped
            break
        except PermissionError:  # a member we may not signal: signal the process alone
            process.send_signal(signum)
        try:
            return process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            if signum == signal.SIGKILL:
                raise
    return process.wait(timeout=grace_s)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signum)


@contextlib.contextmanager
def ending_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt(signum)`` inside the block, as Ctrl-C
    raises ``KeyboardInterrupt``; the previous handlers come back after it.

    Without a handler either signal ends the process at once, its ``finally`` clauses unrun,
    and a child in a session of its own runs on. :func:`interrupt_signal` tells which came.
    """
    others = [s for s in ENDING_SIGNALS if s != signal.SIGINT]
    previous = {s: signal.signal(s, _interrupt) for s in others}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def interrupt_signal(stop: KeyboardInterrupt) -> int:
    """The signal behind ``stop``: the one :func:`ending_signals_interrupt` raised it for, or
    SIGINT for Ctrl-C's own."""
    return int(stop.args[0]) if stop.args and isinstance(stop.args[0], int) else signal.SIGINT


class _DeferredSignals:
    """Ending signals recorded instead of acted on, until :meth:`release`.

    Each ending signal with a handler or the default action gets a handler that only records
    it (a handler runs in the main thread, between two bytecodes, so one that raised could do
    it inside ``Popen``); an ignored one is left ignored, so a child inherits that. Nothing is
    deferred outside the main thread, where no handler can be set (nor runs).
    """

    def __init__(self) -> None:
        self.came: list[int] = []
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in ENDING_SIGNALS:
            handler = signal.getsignal(signum)
            if handler is not None and handler != signal.SIG_IGN:
                self.previous[signum] = signal.signal(signum, self._record)

    def _record(self, signum: int, _frame: object) -> None:
        self.came.append(signum)

    def release(self) -> None:
        """Puts the handlers back, then delivers each signal that came (once each) to them."""
        previous, self.previous = self.previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        came, self.came = list(dict.fromkeys(self.came)), []
        for signum in came:
            signal.raise_signal(signum)


def start_session(
    command: Sequence[str], **popen_kwargs: Any
) -> tuple[subprocess.Popen, Callable[[], None]]:
    """Starts ``command`` in a session of its own and returns it with ``release``, which
    lets the ending signals (:data:`ENDING_SIGNALS`) act again.

    A signal whose handler raised inside ``Popen``, after the fork, would lose the handle of
    a child that runs on out of the caller's reach (its own session gets no Ctrl-C). So the
    ending signals are deferred until the caller, holding the handle inside the ``try`` that
    ends the child, calls ``release()``: a signal that came meanwhile acts then. They are
    deferred by handlers, not by the signal mask, so the child starts with the caller's mask
    and dispositions and ``Popen`` needs no ``preexec_fn`` (which would fork a threaded
    process: JAX's, or the launcher's own readers).

    Args:
        command: the program and its arguments.
        **popen_kwargs: further arguments of ``subprocess.Popen`` (not
            ``start_new_session``).

    Returns:
        The process and ``release``.
    """
    deferred = _DeferredSignals()
    try:
        process = subprocess.Popen(list(command), start_new_session=True, **popen_kwargs)
    except BaseException:
        deferred.release()
        raise
    return process, deferred.release
