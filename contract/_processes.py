"""Whether a process lives, and how one that ran past its bound is ended: one owner for both.

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
    Linux ``proc(5)``: ``/proc/<pid>/stat`` (state, ppid, pgrp, session after the command
    name in parentheses); "Z  Zombie", "X  Dead". ``kill(2)``: "If sig is 0, then no signal
    is sent, but existence and permission checks are still performed".
"""

from __future__ import annotations

import os
import signal
import subprocess


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
