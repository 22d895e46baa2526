"""Small collectives: gather every replica's data once, then run as one instance.

A ring needs ``G - 1`` dependent hops and each needs its peer to get the CPU; on a shared,
oversubscribed host that latency dominates small messages. When the whole job's data is
small, one nonblocking Allgather of every replica's leaves lets each instance run the
collective alone, as the one-instance layout holding all replicas does. That layout gives
the same bits as every other (the reduction order depends only on global replica indices),
so the shortcut changes the speed, never the result.
"""

from __future__ import annotations

import os

import numpy as np

from gcl._transport import Transport
from gcl._validation import Call

# Gather when every replica's data together is at most this many bytes.
SMALL_JOB_BYTES = int(os.environ.get("GCL_EMU_SMALL_JOB_BYTES", str(256 << 10)))
_ALIGN = 16


def _offsets(leaves: list[np.ndarray]) -> tuple[list[int], int]:
    offsets, end = [], 0
    for leaf in leaves:
        offsets.append(end)
        end += -(-leaf.nbytes // _ALIGN) * _ALIGN
    return offsets, end


def gather_if_small(
    call: Call, transport: Transport | None, deadline: float, what: str
) -> tuple[Call, Transport | None, slice]:
    """The call to run, its transport, and which of its replicas' results are this instance's.

    Returns ``call`` unchanged when there is one instance or the data is large; otherwise a
    one-instance call holding all replicas (transport None) and this instance's slice.
    """
    mine = slice(0, call.local)
    if transport is None:
        return call, transport, mine
    offsets, per_replica = _offsets(call.leaves[0])
    if per_replica * call.num_replicas > SMALL_JOB_BYTES:
        return call, transport, mine
    send = np.zeros(per_replica * call.local, np.uint8)
    for k, leaves in enumerate(call.leaves):
        for leaf, off in zip(leaves, offsets, strict=True):
            start = k * per_replica + off
            send[start : start + leaf.nbytes] = (
                np.ascontiguousarray(leaf).reshape(-1).view(np.uint8)
            )
    recv = np.empty(per_replica * call.num_replicas, np.uint8)
    request = transport.comm.Iallgather(send, recv)
    transport.wait_all([request], deadline, what)
    everyone = [
        [
            np.frombuffer(recv, leaf.dtype, leaf.size, r * per_replica + off).reshape(leaf.shape)
            for leaf, off in zip(call.leaves[0], offsets, strict=True)
        ]
        for r in range(call.num_replicas)
    ]
    # This instance's own replicas keep their original arrays (no behaviour depends on it,
    # but it avoids a copy for the local part).
    start = call.instance * call.local
    everyone[start : start + call.local] = call.leaves
    alone = Call(everyone, call.treedef, call.num_replicas, 1, 0, call.num_replicas)
    return alone, None, slice(start, start + call.local)
