"""The order in which this host's bootstraps ended, as the kernel reported each end.

When one bootstrap is killed (``kill -9``), MPICH's process manager kills the job's other
bootstraps about a tenth of a second later, often before the watchdog's next look; every
instance is then gone without a status. The program of the killed one records its parent's
death (``launch._orphan_watch``), but under load MPICH can kill that program too before it
runs. The launcher holds a pid file descriptor (``pidfd_open``) for each bootstrap of this
host it has checked, and a thread of its own waits on them all (``poll``): a descriptor
becomes readable when its process ends, so each wake-up sees who has ended by then among
those it waited on. A bootstrap is named first only when the wake-up that saw it end was
also waiting on every other candidate and saw none of them end: two seen in one wake-up
(the thread woke too late), or a candidate not waited on then (never watched: gone before
the watchdog's first look, on another host, or added after the thread's last look), leave
the order unknown, and the caller looks for other evidence.

References:
    Linux ``pidfd_open(2)`` ("the file descriptor ... becomes readable when the process
    terminates") and ``poll(2)``; Python documentation, ``os.pidfd_open`` and ``select.poll``.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable, Collection
from typing import NamedTuple

_WAKE_SECONDS = 0.05  # how soon a descriptor added while the thread waits is watched too


class _Batch(NamedTuple):
    """One wake-up: the instances seen ended, among those it waited on."""

    ended: frozenset[int]
    waited_on: frozenset[int]


class EndOrder:
    """Watches bootstraps' pid file descriptors and keeps the order in which they ended.

    Nothing is watched where pid file descriptors are not to be had (``os.pidfd_open``
    missing, or failing on a kernel before Linux 5.3): :meth:`first` then knows nothing.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, int] = {}  # pid file descriptor -> instance
        self._batches: list[_Batch] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, instance: int, pid: int, still_ours: Callable[[], bool]) -> None:
        """Watches ``instance``'s bootstrap ``pid`` from now on.

        ``still_ours`` is asked again once the descriptor is open: a pid that ended and was
        reused between the caller's check and the open would otherwise be watched in its
        place. Nothing here raises: what cannot be watched is left unwatched.
        """
        if not hasattr(os, "pidfd_open"):
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already, no permission, or no pidfd: no evidence from here
            return
        try:
            watched = still_ours() and self._add(instance, fd)
        except (OSError, RuntimeError):  # /proc unreadable, or no thread could start
            watched = False
        if not watched:
            os.close(fd)

    def _add(self, instance: int, fd: int) -> bool:
        """Adds ``fd`` to what the thread waits on (starting it); False once closed."""
        with self._lock:
            if self._stop.is_set():
                return False
            if self._thread is None:
                thread = threading.Thread(
                    target=self._wait, name="poprun-emu end order", daemon=True
                )
                thread.start()
                self._thread = thread
            self._watched[fd] = instance
            return True

    def first(self, among: Collection[int]) -> int | None:
        """The instance of ``among`` seen ending alone, by a wake-up that waited on every
        one of ``among``; None when the earliest wake-up that saw one of them end saw
        several, or did not wait on them all, or none was seen."""
        wanted = frozenset(among)
        with self._lock:
            for batch in self._batches:
                seen = batch.ended & wanted
                if seen:
                    alone = len(seen) == 1 and wanted <= batch.waited_on
                    return next(iter(seen)) if alone else None
        return None

    def close(self) -> None:
        """Stops the thread and closes every descriptor still watched (twice is harmless)."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            for fd in self._watched:
                os.close(fd)
            self._watched.clear()

    def _wait(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                watched = dict(self._watched)
            if not watched:
                self._stop.wait(_WAKE_SECONDS)
                continue
            poller = select.poll()
            for fd in watched:
                poller.register(fd, select.POLLIN)
            ended = [fd for fd, _ in poller.poll(_WAKE_SECONDS * 1000)]
            if not ended:
                continue
            with self._lock:
                self._batches.append(
                    _Batch(frozenset(watched[fd] for fd in ended), frozenset(watched.values()))
                )
                for fd in ended:
                    with contextlib.suppress(KeyError):
                        del self._watched[fd]
                    os.close(fd)
