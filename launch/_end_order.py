"""The order in which this host's bootstraps ended, as the kernel reported each end.

When one bootstrap is killed (``kill -9``), MPICH's process manager kills the job's other
bootstraps about a tenth of a second later, often before the watchdog's next look; every
instance is then gone without a status. The program of the killed one records its parent's
death (``launch._orphan_watch``), but under load MPICH can kill that program too before it
runs. The launcher holds a pid file descriptor (``pidfd_open``) for each bootstrap of this
host it has checked, and a thread of its own waits on them all (``poll``): a descriptor
becomes readable when its process ends, so each wake-up sees who has ended by then. A
bootstrap seen ending alone, before any other, was the first; two seen in the same wake-up
are not told apart (the thread woke too late), and the caller looks for other evidence.

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

_WAKE_SECONDS = 0.05  # how soon a descriptor added while the thread waits is watched too


class EndOrder:
    """Watches bootstraps' pid file descriptors and keeps the order in which they ended.

    Each ``poll`` that returns adds one batch: the instances whose bootstrap had ended by
    then and not before. Nothing is watched where ``os.pidfd_open`` does not exist (not
    Linux, or a kernel before 5.3): :meth:`first` then knows nothing.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, int] = {}  # pid file descriptor -> instance
        self._batches: list[frozenset[int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, instance: int, pid: int, still_ours: Callable[[], bool]) -> None:
        """Watches ``instance``'s bootstrap ``pid`` from now on.

        ``still_ours`` is asked again once the descriptor is open: a pid that ended and was
        reused between the caller's check and the open would otherwise be watched in its
        place.
        """
        if not hasattr(os, "pidfd_open") or self._stop.is_set():
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already (or no permission): no evidence from here
            return
        if not still_ours():
            os.close(fd)
            return
        with self._lock:
            self._watched[fd] = instance
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._wait, name="poprun-emu end order", daemon=True
                )
                self._thread.start()

    def first(self, among: Collection[int]) -> int | None:
        """The instance of ``among`` seen ending alone before any other of them; None when
        the earliest wake-up that saw one of them saw several, or none was seen."""
        with self._lock:
            for batch in self._batches:
                seen = batch.intersection(among)
                if seen:
                    return next(iter(seen)) if len(seen) == 1 else None
        return None

    def close(self) -> None:
        """Stops the thread and closes every descriptor still watched."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for fd in self._watched:
                os.close(fd)
            self._watched.clear()

    def _wait(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                watched = dict(self._watched)
            poller = select.poll()
            for fd in watched:
                poller.register(fd, select.POLLIN)
            ended = [fd for fd, _ in poller.poll(_WAKE_SECONDS * 1000)]
            if not ended:
                continue
            with self._lock:
                self._batches.append(frozenset(watched[fd] for fd in ended))
                for fd in ended:
                    with contextlib.suppress(KeyError):
                        del self._watched[fd]
                    os.close(fd)
