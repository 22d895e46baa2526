"""Optimiser-state offloading: the state lives in streaming memory between weight updates.

On an IPU-POD, offloaded optimiser state sits in the IPU-Machine's streaming memory (DDR) and
is streamed onto the chip for the weight update and back out after it, trading always-live
In-Processor-Memory for host/streaming-link traffic in the weight-update phase. The emulator
does the same for real: between steps the state is a pytree of host NumPy arrays (never device
buffers); :func:`stream_in` copies it to the device for the update and :func:`stream_out`
copies the new state back. Copies are bit-exact, so training numerics are identical to keeping
the state on chip; what changes is where the bytes live and how many cross the link, which
:class:`StreamTraffic` reports for the hardware model to charge.

References:
    PopART User Guide, "Tensor locations": ``optimiserStateTensorLocationSettings`` with
    ``TensorStorage.OffChip`` keeps optimiser state in streaming memory and loads it when the
    optimiser step needs it. Memory and Performance Optimisation on the IPU, 4.4.4 "Disabling
    variable offloading" (the transfer cost this buys memory with).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from popdist_emu._trees import tree_nbytes


class StreamTraffic(NamedTuple):
    """Bytes moved over the streaming-memory link by one weight update.

    Attributes:
        bytes_in: optimiser state streamed onto the replica before the update.
        bytes_out: updated state streamed back to streaming memory after it.
    """

    bytes_in: int
    bytes_out: int

    @property
    def total(self) -> int:
        """Both directions: what the weight-update phase is charged for."""
        return self.bytes_in + self.bytes_out


class StreamingState(NamedTuple):
    """Optimiser state held in streaming memory: host NumPy leaves plus the tree structure.

    Attributes:
        leaves: host arrays, owned by this value (copies, never views of device buffers).
        treedef: the optimiser state's pytree structure, to rebuild it on the device.
    """

    leaves: tuple[np.ndarray, ...]
    treedef: Any

    @property
    def nbytes(self) -> int:
        """Bytes the state occupies in streaming memory (and would occupy on chip)."""
        return sum(leaf.nbytes for leaf in self.leaves)


def offload_traffic(state: Any) -> StreamTraffic:
    """The streaming-memory traffic of one offloaded weight update: the whole state in, then
    out (the state's shape does not change in an update). Works on shapes alone."""
    nbytes = tree_nbytes(state)
    return StreamTraffic(nbytes, nbytes)


def stream_out(state: Any) -> StreamingState:
    """Moves an optimiser state to streaming memory: every leaf becomes an owned host copy.

    ``np.array(..., copy=True)`` rather than ``np.asarray``: on the CPU backend ``asarray`` can
    alias the device buffer, and the point of offloading is that no device buffer is kept.
    """
    leaves, treedef = jax.tree_util.tree_flatten(state)
    return StreamingState(tuple(np.array(leaf, copy=True) for leaf in leaves), treedef)


def stream_in(stored: StreamingState) -> Any:
    """Streams the state back onto the device for the weight update (a bit-exact copy).

    ``may_alias=False``: the device copy must not share memory with streaming memory, since
    the update may donate (reuse) its input buffers.
    """
    if not isinstance(stored, StreamingState):
        raise TypeError(
            f"stream_in: `stored` must be a StreamingState from stream_out(...), got "
            f"{type(stored).__name__}; offload the state first with stream_out(opt_state)."
        )
    return jax.tree_util.tree_unflatten(
        stored.treedef, [jax.device_put(x, may_alias=False) for x in stored.leaves]
    )


def offloaded_update(
    update: Callable[[Any, Any, Any], tuple[Any, Any]],
    params: Any,
    stored: StreamingState,
    grads: Any,
) -> tuple[Any, StreamingState, StreamTraffic]:
    """One weight update with the optimiser state in streaming memory.

    Streams the state in, runs ``update(params, opt_state, grads) -> (params, opt_state)``
    (the same function, typically jitted, that on-chip training uses) and streams the new state
    out, so the numbers are exactly those of on-chip state.

    Returns:
        ``(new_params, new_stored_state, traffic)``.
    """
    opt_state = stream_in(stored)
    new_params, new_state = update(params, opt_state, grads)
    new_stored = stream_out(new_state)
    return new_params, new_stored, StreamTraffic(stored.nbytes, new_stored.nbytes)


@dataclasses.dataclass(frozen=True)
class OffloadedUpdate:
    """An update function whose optimiser state lives in streaming memory between calls.

    Wraps the runtime's ``update_fn(params, opt_state, grads) -> (params, opt_state)`` into the
    same signature with a :class:`StreamingState` in place of ``opt_state``, so it drops into
    any stage that calls an update function (e.g. ``AllReduceUpdate(OffloadedUpdate(fn))``
    with ``TrainState(params, stream_out(optimiser.init(params)))``). Each call moves
    :func:`offload_traffic` ``(state)`` bytes.
    """

    update_fn: Callable[[Any, Any, Any], tuple[Any, Any]]

    def __call__(
        self, params: Any, stored: StreamingState, grads: Any
    ) -> tuple[Any, StreamingState]:
        new_params, new_stored, _ = offloaded_update(self.update_fn, params, stored, grads)
        return new_params, new_stored
