"""What ``/proc`` says about a job's processes: their groups, which are gone, stopped or
still running, for the launcher's watchdog (``launch._watchdog``).

Every bootstrap records its pid and process group in the job directory; a group is trusted
only after ``/proc`` confirms that its leader descends from the process the launcher started.

References:
    Linux ``proc(5)``: ``/proc/<pid>/stat`` fields (state, ppid, pgrp, session); a zombie
    ("Z") has ended and only waits to be reaped.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from contract import (
    ENV_JOB_DIR,
    has_ended,
    orphaned_path,
    pid_alive,
    read_pid_file,
    stat_fields,
)
from launch._end_order import EndOrder
from launch._exits import InstanceExit, read_exits
from launch._host_watch import stale


def _every_process() -> Iterator[tuple[int, list[str]]]:
    """``(pid, stat fields)`` of every process ``/proc`` shows (none where it cannot be read)."""
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            fields = stat_fields(int(entry)) if entry.isdigit() else None
            if fields is not None:
                yield int(entry), fields


def _stat(pid: int) -> tuple[int, int] | None:
    """``(parent pid, process group)`` of ``pid`` from ``/proc``, None if it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else (int(fields[1]), int(fields[2]))


def _ours(pid: int, pgid: int, root: int) -> bool:
    """Whether ``pid`` leads process group ``pgid`` and descends from ``root``."""
    if not os.path.isdir("/proc"):
        return True  # no /proc to check against: trust the bootstrap's record
    stat = _stat(pid)
    if stat is None or stat[1] != pgid or pgid != pid:
        return False
    for _ in range(64):
        if pid == root:
            return True
        stat = _stat(pid)
        if stat is None or stat[0] <= 1:
            return False
        pid = stat[0]
    return False


class Groups:
    """The instances' process groups, each checked once, when first seen, and then kept; the
    bootstraps checked here are watched for the order in which they end (:meth:`close` stops
    that)."""

    def __init__(self, job_dir: str, instances: Sequence[int], root: int) -> None:
        self.job_dir, self.instances, self.root = job_dir, instances, root
        self.known: dict[int, tuple[int, int]] = {}
        self.remote: set[int] = set()  # started where /proc does not show them (another host)
        self.end_order = EndOrder()

    def __call__(self) -> dict[int, tuple[int, int]]:
        for i in self.instances:
            if i in self.known or i in self.remote:
                continue
            record = read_pid_file(self.job_dir, i)
            if record is None:
                continue
            pid, pgid = record
            if _ours(pid, pgid, self.root):
                self.known[i] = (pid, pgid)
                self.end_order.watch(i, pid, functools.partial(_ours, pid, pgid, self.root))
            elif _orphaned_here(pid, pgid, self.job_dir):
                self.known[i] = (pid, pgid)
            else:
                self.remote.add(i)
        return dict(self.known)

    def close(self) -> None:
        """Stops watching the bootstraps' ends."""
        self.end_order.close()


def _orphaned_here(pid: int, pgid: int, job_dir: str) -> bool:
    """Whether bootstrap ``pid`` is gone but its group still holds a process of this job.

    A bootstrap killed before the watchdog's first look at its pid file can no longer be
    traced to the launcher through ``/proc``; its program runs on, orphaned, in the
    bootstrap's group. Watched as if on another host, that group would never be signalled,
    and the program would outlive the job. It is this job's when a live member of the group
    carries the job's directory in its environment (``/proc/<pid>/environ``), which no
    process outside the job has.
    """
    if pid_alive(pid) or pgid <= 1:
        return False
    marker = f"{ENV_JOB_DIR}={job_dir}".encode()
    return any(
        not has_ended(fields) and int(fields[2]) == pgid and marker in _environ(pid).split(b"\0")
        for pid, fields in _every_process()
    )


def _environ(pid: int) -> bytes:
    """``/proc/<pid>/environ`` (NUL-separated), empty if it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def vanished(groups: Groups, exits: Mapping[int, InstanceExit]) -> Iterator[int]:
    """Instances whose bootstrap is gone without writing a status (it was killed); on another
    host, that stopped renewing its pid file.

    ``exits`` were read before this looks at the bootstraps, and a bootstrap writes its
    status before it exits: one that did both in between (a loaded machine, or a peer the
    MPI ended) is gone with a status. So the statuses of the gone are read again, after
    their end was seen, and only those still without one have vanished.
    """
    gone = [i for i, (pid, _) in groups().items() if i not in exits and not pid_alive(pid)]
    late = read_exits(groups.job_dir, gone) if gone else {}
    yield from (i for i in gone if i not in late)
    now_ns = time.time_ns()
    for i in sorted(groups.remote):
        if i not in exits and stale(groups.job_dir, i, now_ns):
            yield i


def session_members(sid: int) -> list[int]:
    """The processes still in session ``sid`` (the one mpiexec leads), from ``/proc``."""
    me = os.getpid()
    return [pid for pid, fields in _every_process() if pid != me and int(fields[3]) == sid]


def stopped_instances(groups: Groups, exits: Mapping[int, InstanceExit]) -> list[int]:
    """Instances (without an exit status) with a stopped process (SIGSTOP, a debugger)."""
    waiting = {pgid: i for i, (_, pgid) in groups().items() if i not in exits}
    stopped = set()
    for _, fields in _every_process():
        if fields[0] in ("T", "t") and int(fields[2]) in waiting:
            stopped.add(waiting[int(fields[2])])
    return sorted(stopped)


def stopped_bootstraps(groups: Groups, exits: Mapping[int, InstanceExit]) -> set[int]:
    """Instances (without an exit status) whose bootstrap itself is stopped: its program
    may run on, but nothing relays its output or its end while it is."""
    stopped = set()
    for i, (pid, _) in groups().items():
        fields = None if i in exits else stat_fields(pid)
        if fields is not None and fields[0] in ("T", "t"):
            stopped.add(i)
    return stopped


def killed_first(
    groups: Groups,
    lost: Sequence[int],
    mpi_named: Callable[[], int | None] | None = None,
    wait_s: float = 0.0,
) -> tuple[list[int], bool]:
    """``lost`` (instances whose bootstrap is gone without a status) with the one that was
    killed on its own first, and whether any evidence told it from the others.

    A bootstrap killed from outside (``kill -9`` of its pid) leaves its program running,
    orphaned; the MPI's process manager then ends the job's other processes by their groups,
    bootstrap and program together, often before the watchdog's next look. So both are lost
    by then. The evidence, strongest first: an MPI notice that names the first to end
    (``mpi_named``: Open MPI's, by rank); the order in which this host's bootstraps were
    seen ending (``launch._end_order``); the programs' records of their bootstrap's death
    (``launch._orphan_watch``), the earliest naming the cause, which under load may come
    after the watchdog looks, so with more than one lost and nothing else deciding the
    watchdog waits for one, up to ``wait_s``; last, the instance whose group alone still has
    a live (not zombie) process. When nothing tells them apart (MPICH killed the orphaned
    program too before it recorded), the second value is False and the caller names them
    all rather than guess.
    """
    if len(lost) < 2:  # nothing to order (the watchdog asks on every pass): no /proc scan
        return list(lost), True
    deadline = time.monotonic() + wait_s
    while True:
        orphaned = {i: _orphaned_at(groups.job_dir, i) for i in lost}
        first = None if mpi_named is None else mpi_named()
        if first is None or first not in lost:
            first = groups.end_order.first(lost)
        if first is not None and first in lost:
            return [first, *(i for i in lost if i != first)], True
        if any(t is not None for t in orphaned.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    live = {int(fields[2]) for _, fields in _every_process() if not has_ended(fields)}
    known = groups()

    def evidence(i: int) -> tuple[bool, int, bool]:
        return orphaned[i] is None, orphaned[i] or 0, not (i in known and known[i][1] in live)

    order = sorted(lost, key=evidence)
    return order, evidence(order[0]) != evidence(order[1])


def _orphaned_at(job_dir: str, instance: int) -> int | None:
    """When the program of ``instance`` recorded its bootstrap's death (``launch._orphan_watch``),
    in ns since the epoch; None if it did not."""
    try:
        with open(orphaned_path(job_dir, instance)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
