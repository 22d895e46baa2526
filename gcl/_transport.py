"""Point-to-point transport between instances: a private communicator and bounded waits.

Data moves through mpi4py's buffer interface (upper-case methods on numpy arrays), never
pickled. Every wait polls ``Testsome`` against a deadline with a short backoff, so a peer
that died or never arrived raises :class:`CollectiveTimeout` naming it instead of hanging.

Failing fast (the shared transport of COMM_WORLD, which every collective uses by default):
once connected, an uncaught exception aborts the whole job (``MPI_Abort``, as
``python -m mpi4py`` does) instead of blocking in ``MPI_Finalize`` while the peers sit in a
collective; an instance that returns tells its peers it is leaving (a message on a second
private communicator), so a peer waiting for it in a collective stops at once and names it;
and a timed-out collective leaves the transport unusable, so the program's end aborts the
job rather than finalizing with requests pending. A timeout never calls ``MPI_Cancel``
(under Open MPI it never returns on a pending request).

References:
    mpi4py User Guide, "Tutorial: point-to-point communication (buffers)";
    MPI 4.1 standard, section 3.7 (nonblocking communication) and 3.5 (message order:
    messages from one sender with one tag on one communicator are matched in order).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING

import numpy as np

from contract import DEFAULT_GCL_TIMEOUT_S as _UNSET_TIMEOUT_S
from contract import ENV_GCL_ON_FAILURE, ENV_GCL_TIMEOUT
from gcl._waiting import ANNOUNCE_WAIT_S, WAITING_FILE, done_waiting, record_waiting

if TYPE_CHECKING:  # mpi4py.MPI initializes MPI when imported: only on first use
    from mpi4py import MPI

# The launcher's --collective-timeout sets GCL_EMU_TIMEOUT for every instance.
DEFAULT_TIMEOUT_S = float(os.environ.get(ENV_GCL_TIMEOUT, _UNSET_TIMEOUT_S))
# How often a waiting instance looks for a peer's leaving notice (a cheap Iprobe).
_LEAVE_PROBE_S = 0.05


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


class PeerLeft(CollectiveTimeout):
    """A peer this collective waits for has returned from its program: it will never come."""


def _abort(code: int) -> None:
    """Ends the whole job now, never through ``MPI_Finalize``.

    Under ``poprun-emu`` (``GCL_EMU_ON_FAILURE=exit``) the process exits at once without
    finalizing: its bootstrap records the exit code, so the launcher names this instance, and
    mpiexec and the launcher end the others. Elsewhere ``MPI_Abort`` on COMM_WORLD, as
    ``python -m mpi4py`` does.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    if os.environ.get(ENV_GCL_ON_FAILURE) == "exit":
        os._exit(code)
    from mpi4py import MPI

    MPI.COMM_WORLD.Abort(code)


def _in_parallel_job() -> bool:
    """Whether MPI is initialized (not finalized) in a job of more than one process."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return False
    try:
        running = mpi.Is_initialized() and not mpi.Is_finalized()
        return bool(running and mpi.COMM_WORLD.Get_size() > 1)
    except Exception:  # a broken MPI must not hide the original error
        return False


def _install_abort_hook() -> None:
    """After the default hook prints the traceback, end the job (as ``-m mpi4py`` does).

    Installed when gcl is imported; it acts only in an MPI job of several processes, where
    the uncaught exception would otherwise block in ``MPI_Finalize`` while the peers wait in
    a collective.
    """
    previous = sys.excepthook
    if getattr(previous, "_gcl_aborts", False):
        return

    def abort_on_uncaught(
        kind: type[BaseException], value: BaseException, traceback: TracebackType | None
    ) -> None:
        previous(kind, value, traceback)
        if _in_parallel_job():
            _abort(1)

    # mypy allows no attributes a function does not declare; this marker is read back above.
    abort_on_uncaught._gcl_aborts = True  # type: ignore[attr-defined]
    sys.excepthook = abort_on_uncaught


_install_abort_hook()


class Transport:
    """The instances' private communicator and bounded nonblocking messaging.

    Args:
        comm: an mpi4py communicator of the instances. ``None`` duplicates COMM_WORLD once
            (on first use) so the collectives' messages never mix with the user's.
    """

    def __init__(self, comm: MPI.Comm | None = None) -> None:
        self._user_comm = comm
        self._comm: MPI.Comm | None = None
        # Leaving notices and the final barrier (default only).
        self._control: MPI.Comm | None = None
        self._owned = False
        self.broken = False  # a wait timed out: requests may still be pending
        # Collectives this instance has begun; its leaving notice carries the count, so a
        # peer still inside the last of them knows the leaver finished it (its data is on
        # the way) rather than skipped it.
        self.collectives = 0
        self._gone: dict[int, int] = {}  # peer -> collectives it had begun when it left

    @property
    def _base(self) -> MPI.Comm:
        if self._user_comm is not None:
            return self._user_comm
        from mpi4py import MPI

        return MPI.COMM_WORLD

    def connect(self, deadline: float, what: str) -> MPI.Comm:
        """The communicator in use: COMM_WORLD duplicated on first use, with a bounded wait
        (Idup, not Dup: a blocking Dup would hang if a peer never arrives)."""
        if self._comm is not None:
            return self._comm
        if self._user_comm is not None:
            self._comm = self._user_comm
            return self._comm
        comm, request = self._base.Idup()
        control, control_request = self._base.Idup()
        self.wait_all([request, control_request], deadline, what)
        self._comm = comm
        self._control = control
        self._owned = True
        return comm

    def begin(self, deadline: float, what: str) -> None:
        """One collective begins: connect (first time) and count it."""
        self.connect(deadline, what)
        self.collectives += 1

    def leave(self) -> None:
        """At the program's end: tell the peers, wait (bounded) until all have left, finalize.

        A peer that waits for this instance in a collective sees the notice and aborts the
        job naming it; if the peers do not all arrive within the default timeout, or a
        collective of ours timed out, this instance aborts the job instead of blocking in
        ``MPI_Finalize``.
        """
        if self._control is None:
            return
        from mpi4py import MPI

        if MPI.Is_finalized():
            return
        rank, size = self._control.Get_rank(), self._control.Get_size()
        if self.broken:
            print(
                f"gcl: instance {rank} ends after a failed collective; aborting the job "
                f"instead of waiting in MPI_Finalize.",
                file=sys.stderr,
                flush=True,
            )
            _abort(1)
        notice = np.array([rank, self.collectives], np.int64)
        sends = [self._control.Isend(notice, dest=p, tag=0) for p in range(size) if p != rank]
        deadline = deadline_of(None)
        try:
            self.wait_all([self._control.Ibarrier()], deadline, "finalize", probe=False)
            got = np.zeros((size, 2), np.int64)
            recvs = [
                self._control.Irecv(got[p], source=p, tag=0)
                for p in range(size)
                if p != rank and p not in self._gone  # notices already read while waiting
            ]
            self.wait_all(recvs + sends, deadline, "finalize")
        except CollectiveTimeout:
            print(
                f"gcl: instance {rank} returned from its program, but other instances did not "
                f"finish within {DEFAULT_TIMEOUT_S:g} s (GCL_EMU_TIMEOUT): they still wait in "
                f"a collective or compute; aborting the job.",
                file=sys.stderr,
                flush=True,
            )
            _abort(1)
        self.close()

    @property
    def comm(self) -> MPI.Comm:
        """The communicator in use (the private duplicate once connected)."""
        if self._comm is None:
            return self.connect(deadline_of(None), "connect")
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
        # Owned: both duplicates exist.
        if self._owned and self._comm is not None and self._control is not None:
            from mpi4py import MPI

            if not MPI.Is_finalized():
                self._comm.Free()
                self._control.Free()
        self._comm = None
        self._control = None
        self._owned = False

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> MPI.Request:
        """Start sending a contiguous array (zero copy).

        Sent as raw bytes, so dtypes MPI has no name for (bfloat16) travel too.
        """
        return self.comm.Isend(_as_bytes(buf), dest=dest, tag=tag)

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> MPI.Request:
        """Start receiving into a contiguous array (zero copy), as raw bytes."""
        return self.comm.Irecv(_as_bytes(buf), source=source, tag=tag)

    def _left(self, peers: list[int]) -> int | None:
        """A peer among ``peers`` (-1: all) that returned from its program before finishing
        the collective this instance waits in, if any.

        Every leaving notice that has arrived is read and kept. A peer that left after as
        many collectives as this instance has begun finished the current one: what it sent
        is delivered (MPI progresses while it waits for the others to leave), so it is not
        reported; the deadline still bounds the wait.
        """
        if self._control is None:
            return None
        from mpi4py import MPI

        status = MPI.Status()
        while self._control.Iprobe(source=MPI.ANY_SOURCE, tag=0, status=status):
            source = status.Get_source()
            notice = np.zeros(2, np.int64)
            self._control.Recv(notice, source=source, tag=0)
            self._gone[source] = int(notice[1])
        wanted = set(peers)
        for peer, ran in sorted(self._gone.items()):
            if ran < self.collectives and (-1 in wanted or peer in wanted):
                return peer
        return None

    def wait_some(
        self,
        requests: list[MPI.Request],
        peers: list[int],
        deadline: float,
        what: str,
        probe: bool = True,
    ) -> list[int]:
        """Indices of requests that completed, waiting until at least one has.

        Args:
            requests: pending requests.
            peers: the peer instance of each request (-1: all), named if the deadline passes.
            deadline: ``time.monotonic()`` limit.
            what: the collective, for the error message.
            probe: look for the waited-for peers' leaving notices.

        Raises:
            CollectiveTimeout: the deadline passed (the requests stay pending: cancelling
                them can block forever under Open MPI, so the transport is marked broken and
                the program's end aborts the job).
            PeerLeft: a waited-for peer returned from its program.
        """
        from mpi4py import MPI

        polls = 0
        started = 0.0
        next_probe = time.monotonic() + _LEAVE_PROBE_S
        announced = False  # a timeout or PeerLeft leaves the record for the launcher
        while True:
            done = MPI.Request.Testsome(requests)
            if done:
                if announced:
                    done_waiting()
                return list(done)
            polls += 1
            now = time.monotonic()
            if WAITING_FILE and not announced and polls > 1 and now - started > ANNOUNCE_WAIT_S:
                record_waiting(what, self.collectives)
                announced = True
            if probe and now > next_probe:
                next_probe = now + _LEAVE_PROBE_S
                waiting = [p for p, r in zip(peers, requests, strict=True) if r != MPI.REQUEST_NULL]
                gone = self._left(waiting)
                if gone is not None:
                    self.broken = True
                    if WAITING_FILE:
                        record_waiting(what, self.collectives, gone)
                    raise PeerLeft(
                        f"gcl.{what}: instance {gone} returned from its program while instance "
                        f"{self.rank} waits for it in this collective: every instance must call "
                        f"the same collectives; check instance {gone}'s early return or exit."
                    )
            if now > deadline:
                waiting = sorted(
                    {p for p, r in zip(peers, requests, strict=True) if r != MPI.REQUEST_NULL}
                )
                self.broken = True
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

    def wait_all(
        self,
        requests: list[MPI.Request],
        deadline: float,
        what: str,
        *,
        peers: list[int] | None = None,
        probe: bool = True,
    ) -> None:
        """Wait for every request, bounded by ``deadline``; ``peers`` as :meth:`wait_some`
        takes them (default: each request an exchange among all instances, -1)."""
        from mpi4py import MPI

        peers = [-1] * len(requests) if peers is None else peers
        pending = [i for i, r in enumerate(requests) if r != MPI.REQUEST_NULL]
        reqs = [requests[i] for i in pending]
        prs = [peers[i] for i in pending]
        while any(r != MPI.REQUEST_NULL for r in reqs):
            self.wait_some(reqs, prs, deadline, what, probe)

    def allgather_digest(self, digest: bytes, deadline: float, what: str) -> list[bytes]:
        """Every instance's fixed-size ``digest``: one small nonblocking Allgather."""
        size = len(digest)
        out = np.empty(size * self.size, np.uint8)
        req = self.comm.Iallgather(np.frombuffer(digest, np.uint8), out)
        self.wait_all([req], deadline, what)
        return [out[i * size : (i + 1) * size].tobytes() for i in range(self.size)]

    def allgather_bytes(self, data: bytes, deadline: float, what: str) -> list[bytes]:
        """Every instance's ``data`` (variable length), with bounded waits."""
        from mpi4py import MPI

        n = self.size
        lengths = np.zeros(n, np.int64)
        req = self.comm.Iallgather(np.array([len(data)], np.int64), lengths)
        self.wait_all([req], deadline, what)
        counts = lengths.tolist()
        displs = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        out = np.zeros(int(lengths.sum()), np.uint8)
        send = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
        req = self.comm.Iallgatherv(send, [out, counts, displs, MPI.BYTE])
        self.wait_all([req], deadline, what)
        return [out[d : d + c].tobytes() for d, c in zip(displs, counts, strict=True)]


def _as_bytes(buf: np.ndarray) -> np.ndarray:
    # A uint8 view of a contiguous 1-D array: no copy, and read-only inputs stay read-only.
    return buf.view(np.uint8)


_DEFAULT: Transport | None = None
_BY_COMM: dict[int, Transport] = {}


def transport_for(comm: MPI.Comm | None = None) -> Transport:
    """The transport of ``comm``; ``None`` gives the shared private duplicate of COMM_WORLD."""
    global _DEFAULT
    if comm is None:
        if _DEFAULT is None:
            _DEFAULT = Transport()
            # Runs before mpi4py's MPI_Finalize (registered earlier, at import; atexit is LIFO).
            atexit.register(_DEFAULT.leave)
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
