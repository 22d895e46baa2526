"""The job's output: mpiexec's piped stdout and stderr, copied to the launcher's as they come.

MPICH's termination banner and Open MPI's notice are held back (``launch._mpi_banner``): the
launcher names the failed instance itself. The last of mpiexec's stderr is kept, so that a
failure can be read against the MPI's and its ssh's own words (which host's connection
closed).
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import threading
import time
from typing import BinaryIO

from launch._mpi_banner import BannerFilter, first_ended

GRACE_SECONDS = 3.0  # how long the output may still come once the job's processes ended
_RECENT_CHUNKS = 16  # of at most 64 KiB each


class JobOutput:
    """Copies mpiexec's piped stdout and stderr to ours as they come, without MPICH's
    termination banner (``launch._mpi_banner``); nothing to do when they are not piped."""

    def __init__(self, proc: subprocess.Popen, stdout: BinaryIO, stderr: BinaryIO) -> None:
        self._filters: list[BannerFilter] = []
        self._threads = []
        self._held = False
        self._recent: collections.deque[bytes] = collections.deque(maxlen=_RECENT_CHUNKS)
        for pipe, sink, recent in (
            (proc.stdout, stdout, None),
            (proc.stderr, stderr, self._recent),
        ):
            if pipe is not None:
                banner = BannerFilter()
                self._filters.append(banner)
                self._threads.append(
                    threading.Thread(target=_copy, args=(pipe, sink, banner, recent), daemon=True)
                )
        for thread in self._threads:
            thread.start()

    def drain(self, timeout: float = GRACE_SECONDS) -> None:
        """Waits (bounded) until the job's output is written: its processes have ended, so
        the pipes close; a descendant that kept one open is not waited for longer."""
        if self._held:
            return  # a descendant held a pipe past one bound already: not waited for again
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._held = any(thread.is_alive() for thread in self._threads)

    def recent_errors(self) -> str:
        """The last of mpiexec's stderr (its own messages and its ssh's among them)."""
        return b"".join(self._recent).decode(errors="replace")

    def first_ended(self) -> int | None:
        """The instance the MPI's held-back notice says ended first (``launch._mpi_banner.
        first_ended``); None before one came, or when the output is not piped."""
        for banner in self._filters:
            named = first_ended(list(banner.hidden))
            if named is not None:
                return named
        return None

    def show_hidden(self) -> None:
        """Prints the MPI's termination notices that were held back: the launcher could not
        explain the end itself, so they may be all there is."""
        for banner in self._filters:
            _write(sys.stderr.buffer, b"".join(banner.hidden))


def _copy(
    pipe: BinaryIO, sink: BinaryIO, banner: BannerFilter, recent: collections.deque | None
) -> None:
    fd = pipe.fileno()
    while chunk := os.read(fd, 65536):
        if recent is not None:
            recent.append(chunk)
        _write(sink, banner.feed(chunk))
    _write(sink, banner.flush())
    pipe.close()


def _write(sink: BinaryIO, data: bytes) -> None:
    if data:
        with contextlib.suppress(OSError, ValueError):  # a closed terminal loses nothing else
            sink.write(data)
            sink.flush()
