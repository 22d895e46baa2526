"""Run the routes of a collective on this instance: local steps in memory, hops as messages.

Every receive this instance expects is posted first, so no send can block and no order of
arrival can deadlock; then each piece is processed as soon as its input is there and sent
on at once, so the combine of one piece overlaps the transfer of the next (pipelining).
The order of operations on a piece is fixed by its route, never by arrival order.

A send this instance started may still be open when its own part is done: under MPICH a
large message's sender completes only once the receiver, which has the data and may have
left the collective, next enters MPI. A receiver that then computes for longer than the
timeout (Graphcore's ResNet-50 compiles for minutes right after ``hvd.broadcast_parameters``)
would make the sender time out though nothing is wrong; so open sends are kept, with their
buffers, and completed at this instance's next collective, where the receivers call MPI
again (or by ``MPI_Finalize`` at exit).

References:
    MPI Standard 4.0, section 3.7.3 (a send request completes when its buffer may be
    reused, which may wait for the matching receive's progress).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gcl._routes import Item
from gcl._transport import Transport

# Step(item index, hop index, input or None at the route's start) -> the piece to pass on.
Step = Callable[[int, int, "np.ndarray | None"], np.ndarray]

# Sends a collective left open: (transport, requests, their peers, their buffers).
_OPEN_SENDS: list[tuple[Transport, list, list[int], list[np.ndarray]]] = []


def _complete_open_sends(deadline: float, what: str) -> None:
    """Completes the sends earlier collectives left open (their receivers are back in MPI)."""
    while _OPEN_SENDS:
        transport, sends, peers, _ = _OPEN_SENDS[0]
        transport.wait_all(sends, deadline, what, peers=peers)
        _OPEN_SENDS.pop(0)


def _messaging(transport: Transport | None, what: str) -> Transport:
    """The transport for a hop between instances (a one-instance call has no such hop)."""
    if transport is None:
        raise RuntimeError(f"gcl.{what}: a route crosses instances but there is no transport.")
    return transport


def run_items(
    transport: Transport | None,
    items: Sequence[Item],
    instance: int,
    step: Step,
    recv_buffer: Callable[[int, int], np.ndarray],
    finish: Callable[[int, np.ndarray], None],
    deadline: float,
    what: str,
) -> None:
    """Execute this instance's share of ``items``.

    Args:
        transport: messaging between instances (None when there is only one instance).
        items: the collective's routes (identical on every instance).
        instance: this instance's index.
        step: combines this instance's replicas into a piece at one hop.
        recv_buffer: where to receive a piece arriving for (item, hop).
        finish: called with each piece that reached the end of its route here.
        deadline: ``time.monotonic()`` limit for every wait.
        what: the collective's name, for errors.
    """
    _complete_open_sends(deadline, what)
    max_hops = max((len(it.hops) for it in items), default=1)
    recvs: list = []
    recv_tasks: list[tuple[int, int, np.ndarray]] = []
    recv_peers: list[int] = []
    starts: list[int] = []
    for i, it in enumerate(items):
        for h, hop in enumerate(it.hops):
            if hop.instance != instance:
                continue
            if h == 0:
                starts.append(i)
            else:
                buf = recv_buffer(i, h)
                src = it.hops[h - 1].instance
                recvs.append(_messaging(transport, what).irecv(buf, src, i * max_hops + h))
                recv_tasks.append((i, h, buf))
                recv_peers.append(src)
    sends: list = []
    send_peers: list[int] = []
    keep: list[np.ndarray] = []

    def advance(i: int, h: int, piece: np.ndarray | None) -> None:
        out = step(i, h, piece)
        hops = items[i].hops
        if h + 1 < len(hops):
            dest = hops[h + 1].instance
            sends.append(_messaging(transport, what).isend(out, dest, i * max_hops + h + 1))
            send_peers.append(dest)
            keep.append(out)
        else:
            finish(i, out)

    for i in starts:
        advance(i, 0, None)
    remaining = len(recvs)
    while remaining:
        for k in _messaging(transport, what).wait_some(recvs, recv_peers, deadline, what):
            i, h, buf = recv_tasks[k]
            remaining -= 1
            advance(i, h, buf)
    if sends:
        from mpi4py import MPI  # imported (MPI initialised) only where a hop crosses instances

        if not MPI.Request.Testall(sends):
            _OPEN_SENDS.append((_messaging(transport, what), sends, send_peers, keep))
