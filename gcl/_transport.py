"""Point-to-point transport between instances: a private communicator and bounded waits.

Data moves through mpi4py's buffer interface (upper-case methods on numpy arrays), never
pickled. Every wait polls ``Testsome`` against a deadline with a short backoff, so a peer
that died or never arrived raises :class:`CollectiveTimeout` naming it instead of hanging.

References:
    mpi4py User Guide, "Tutorial: point-to-point communication (buffers)";
    MPI 4.1 standard, section 3.7 (nonblocking communication) and 3.5 (message order:
    messages from one sender with one tag on one communicator are matched in order).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from typing import Any

import numpy as np

DEFAULT_TIMEOUT_S = float(os.environ.get("GCL_EMU_TIMEOUT", "300"))


def _default_busy_s() -> float:
    """Seconds to poll busily before yielding: none when the host is oversubscribed.

    With more instances on a host than it has CPUs, a waiting instance that spins steals the
    CPU from the peer it waits for (measured: 16 replicas on 4 instances over 2 CPUs step 2.3x
    slower than plain JAX with 50 ms of spinning, 1.2x without), so it yields at once.
    """
    local = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    if local and int(local) > (os.cpu_count() or 1):
        return 0.0
    return 0.05


# Without a completion, poll busily (as MPI's blocking waits do) for _BUSY_S, then with
# sched_yield until _SPIN_S, then nap between polls.
_BUSY_S = float(os.environ.get("GCL_EMU_BUSY_S") or _default_busy_s())
_SPIN_S = 0.5
_NAP_S = 2e-4


class CollectiveTimeout(RuntimeError):  # noqa: N818 - the contract's name
    """A collective waited longer than its timeout for a peer instance."""


class Transport:
    """The instances' private communicator and bounded nonblocking messaging.

    Args:
        comm: an mpi4py communicator of the instances. ``None`` duplicates COMM_WORLD once
            (on first use) so the collectives' messages never mix with the user's.
    """

    def __init__(self, comm: Any = None) -> None:
        self._user_comm = comm
        self._comm: Any = None
        self._owned = False

    @property
    def _base(self) -> Any:
        if self._user_comm is not None:
            return self._user_comm
        from mpi4py import MPI

        return MPI.COMM_WORLD

    def connect(self, deadline: float, what: str) -> None:
        """Duplicate COMM_WORLD on first use, with a bounded wait (Idup, not Dup: a blocking
        Dup would hang if a peer never arrives)."""
        if self._comm is not None:
            return
        if self._user_comm is not None:
            self._comm = self._user_comm
            return
        comm, request = self._base.Idup()
        self.wait_all([request], [-1], deadline, what)
        self._comm = comm
        self._owned = True

    @property
    def comm(self) -> Any:
        """The communicator in use (the private duplicate once connected)."""
        if self._comm is None:
            self.connect(deadline_of(None), "connect")
        return self._comm

    @property
    def rank(self) -> int:
        """This instance's rank in the communicator."""
        return self._base.Get_rank()

    @property
    def size(self) -> int:
        """Number of instances in the communicator."""
        return self._base.Get_size()

    def close(self) -> None:
        """Free the private duplicate (the user's communicator is left alone)."""
        if self._owned and self._comm is not None:
            from mpi4py import MPI

            if not MPI.Is_finalized():
                self._comm.Free()
        self._comm = None
        self._owned = False

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> Any:
        """Start sending a contiguous array (zero copy).

        Sent as raw bytes, so dtypes MPI has no name for (bfloat16) travel too.
        """
        return self.comm.Isend(_as_bytes(buf), dest=dest, tag=tag)

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> Any:
        """Start receiving into a contiguous array (zero copy), as raw bytes."""
        return self.comm.Irecv(_as_bytes(buf), source=source, tag=tag)

    def wait_some(
        self, requests: list[Any], peers: list[int], deadline: float, what: str
    ) -> list[int]:
        """Indices of requests that completed, waiting until at least one has.

        Args:
            requests: pending requests.
            peers: the peer instance of each request, named if the deadline passes.
            deadline: ``time.monotonic()`` limit.
            what: the collective, for the error message.
        """
        from mpi4py import MPI

        polls = 0
        started = 0.0
        while True:
            done = MPI.Request.Testsome(requests)
            if done:
                return list(done)
            polls += 1
            now = time.monotonic()
            if now > deadline:
                waiting = sorted(
                    {p for p, r in zip(peers, requests, strict=True) if r != MPI.REQUEST_NULL}
                )
                for r in requests:
                    if r != MPI.REQUEST_NULL:
                        # Best effort: collective requests cannot be cancelled.
                        with contextlib.suppress(Exception):
                            r.Cancel()
                who = (
                    "the other instances (a collective exchange)"
                    if waiting == [-1]
                    else f"instance(s) {waiting}"
                )
                raise CollectiveTimeout(
                    f"gcl.{what}: instance {self.rank} waited past its timeout for {who}: "
                    f"expected every instance to enter the same collective; check that no "
                    f"instance died or skipped it, or raise `timeout`."
                )
            # MPI progresses only inside MPI calls, so keep polling while a transfer may be
            # running; yield the CPU between polls (the machine is often oversubscribed and
            # the peer needs it), and sleep only once nothing has completed for a while.
            if polls == 1:
                started = now
            waited = now - started
            if waited > _SPIN_S:
                time.sleep(_NAP_S)
            elif waited >= _BUSY_S:
                os.sched_yield()

    def wait_all(self, requests: list[Any], peers: list[int], deadline: float, what: str) -> None:
        """Wait for every request, bounded by ``deadline``."""
        from mpi4py import MPI

        pending = [i for i, r in enumerate(requests) if r != MPI.REQUEST_NULL]
        reqs = [requests[i] for i in pending]
        prs = [peers[i] for i in pending]
        while any(r != MPI.REQUEST_NULL for r in reqs):
            self.wait_some(reqs, prs, deadline, what)

    def allgather_digest(self, digest: bytes, deadline: float, what: str) -> list[bytes]:
        """Every instance's fixed-size ``digest``: one small nonblocking Allgather."""
        size = len(digest)
        out = np.empty(size * self.size, np.uint8)
        req = self.comm.Iallgather(np.frombuffer(digest, np.uint8), out)
        self.wait_all([req], [-1], deadline, what)
        return [out[i * size : (i + 1) * size].tobytes() for i in range(self.size)]

    def allgather_bytes(self, data: bytes, deadline: float, what: str) -> list[bytes]:
        """Every instance's ``data`` (variable length), with bounded waits."""
        from mpi4py import MPI

        n = self.size
        lengths = np.zeros(n, np.int64)
        req = self.comm.Iallgather(np.array([len(data)], np.int64), lengths)
        self.wait_all([req], [-1], deadline, what)
        counts = lengths.tolist()
        displs = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        out = np.zeros(int(lengths.sum()), np.uint8)
        send = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
        req = self.comm.Iallgatherv(send, [out, counts, displs, MPI.BYTE])
        self.wait_all([req], [-1], deadline, what)
        return [out[d : d + c].tobytes() for d, c in zip(displs, counts, strict=True)]


def _as_bytes(buf: np.ndarray) -> np.ndarray:
    # A uint8 view of a contiguous 1-D array: no copy, and read-only inputs stay read-only.
    return buf.view(np.uint8)


_DEFAULT: Transport | None = None
_BY_COMM: dict[int, Transport] = {}


def transport_for(comm: Any = None) -> Transport:
    """The transport of ``comm``; ``None`` gives the shared private duplicate of COMM_WORLD."""
    global _DEFAULT
    if comm is None:
        if _DEFAULT is None:
            _DEFAULT = Transport()
            atexit.register(_DEFAULT.close)
        return _DEFAULT
    t = _BY_COMM.get(id(comm))
    if t is None or t._user_comm is not comm:
        t = _BY_COMM[id(comm)] = Transport(comm)
    return t


def deadline_of(timeout: float | None) -> float:
    """The monotonic deadline for a collective with ``timeout`` seconds (None = default)."""
    if timeout is not None and not timeout > 0:
        raise ValueError(
            f"`timeout` must be a positive number of seconds, got {timeout!r}; pass e.g. "
            f"timeout=60, or None for the default {DEFAULT_TIMEOUT_S:g} s."
        )
    return time.monotonic() + (DEFAULT_TIMEOUT_S if timeout is None else timeout)
