"""GCL collectives over the global ring of simulated replicas (local hops are copies,
remote hops are MPI messages).

Values are a sequence with one entry per local replica of this instance (entry k is global
replica ``instance * L + k``); each entry is an array or a pytree of arrays (numpy or jax).
The reduction order depends only on global replica indices, so results are bit-identical
for any layout of the same replicas over instances.

How it runs: every chunk of a group's padded buffer follows a fixed route (``_routes``);
consecutive ring positions on one instance are one in-memory hop, instance changes are
nonblocking MPI messages on a private duplicate of COMM_WORLD, pipelined in pieces. Jobs
whose data is small in total are gathered once and reduced by each instance alone
(``_gathered``), which gives the same bits. Every wait is bounded by ``timeout``.

Environment knobs (defaults in brackets): ``GCL_EMU_TIMEOUT`` default timeout in seconds
[120; ``poprun-emu --collective-timeout`` sets it]; ``GCL_EMU_PIECE_BYTES`` pipelined
piece size [1 MiB]; ``GCL_EMU_SMALL_JOB_BYTES``
largest job (all replicas' bytes) that is gathered instead of run as a ring [256 KiB];
``GCL_EMU_BUSY_S`` seconds of busy polling before yielding the CPU [0.05; 0 when a host
runs more instances than it has CPUs]; ``GCL_EMU_ON_FAILURE``: ``exit`` ends a failing
process without ``MPI_Finalize`` (``poprun-emu`` sets it, so that its bootstrap names the
instance), anything else calls ``MPI_Abort`` [abort].
"""

from gcl._all_gather import all_gather as all_gather
from gcl._all_reduce import all_reduce as all_reduce
from gcl._broadcast import broadcast as broadcast
from gcl._groups import All as All
from gcl._groups import Consecutive as Consecutive
from gcl._groups import Orthogonal as Orthogonal
from gcl._operators import Operator as Operator
from gcl._recording import group_name as group_name
from gcl._recording import recording as recording
from gcl._recording import timed_recording as timed_recording
from gcl._reduce_scatter import reduce_scatter as reduce_scatter
from gcl._routes import METHODS as METHODS
from gcl._routes import collective_method as collective_method
from gcl._routes import resolve_method as resolve_method
from gcl._transport import CollectiveTimeout as CollectiveTimeout
from gcl._transport import PeerLeft as PeerLeft

__all__ = [
    "METHODS",
    "All",
    "CollectiveTimeout",
    "Consecutive",
    "Operator",
    "Orthogonal",
    "PeerLeft",
    "all_gather",
    "all_reduce",
    "broadcast",
    "collective_method",
    "group_name",
    "recording",
    "reduce_scatter",
    "resolve_method",
    "timed_recording",
]
