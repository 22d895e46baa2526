"""The reduce-and-update stage of a step: one replaceable function.

After the local replicas have accumulated their gradients, this stage combines them over all
replicas of the job with ``gcl.all_reduce`` and applies the same optimiser update, so every
replica ends the step with identical parameters. The gradient sum and the loss sum travel in
one collective, so the step's global loss costs no extra round trip.

Replicated tensor sharding and optimiser offloading replace this stage as a whole (reduce-
scatter, sharded update, all-gather): anything with the :class:`ReduceUpdateStage` call
signature plugs into :class:`~popdist_emu.Trainer`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import numpy as np

from hardware import CollectiveRecord
from popdist_emu._replica_step import Accumulator, TrainState


class StageResult(NamedTuple):
    """What the stage hands back to the trainer."""

    state: TrainState
    loss_sum: float  # sum of every replica's micro-batch losses of this step
    finite: bool  # whether the reduced gradient is free of NaN and Inf


class ReduceUpdateStage(Protocol):
    """Combines the replicas' accumulators and updates the state, the same on all replicas."""

    def __call__(self, state: TrainState, replica_sums: Sequence[Accumulator]) -> StageResult:
        """Reduces ``replica_sums`` (flat accumulators, one per local replica), then updates."""
        ...

    def collectives(self, accumulator: Any) -> tuple[CollectiveRecord, ...]:
        """The collectives one call runs (``hardware.CollectiveRecord``), from shapes."""
        ...


def tree_nbytes(tree: Any) -> int:
    """Bytes of all leaves of a tree of arrays or shape structs."""
    return sum(
        int(np.prod(leaf.shape, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize
        for leaf in jax.tree.leaves(tree)
    )


@dataclasses.dataclass(frozen=True)
class AllReduceUpdate:
    """Data-parallel reduction: all-reduce (sum) the accumulators, then update.

    Args:
        update_fn: the jitted ``(params, opt_state, grad_flat) -> (params, opt_state)``.
        method: GCL method for the all-reduce.
        comm: mpi4py communicator of the instances; None is gcl's private default.
        timeout: seconds before a missing peer raises ``gcl.CollectiveTimeout``.
    """

    update_fn: Callable
    method: str = "auto"
    comm: Any = None
    timeout: float | None = None

    def __call__(self, state: TrainState, replica_sums: Sequence[Accumulator]) -> StageResult:
        import gcl  # not at import time: offline mode must never touch MPI

        reduced = gcl.all_reduce(
            list(replica_sums), "add", method=self.method, comm=self.comm, timeout=self.timeout
        )[0]
        grad_sum, loss_sum = reduced[:-1], reduced[-1]
        finite = bool(np.isfinite(grad_sum).all())
        if not finite:
            # Leave the state untouched: the trainer reports where the NaN came from.
            return StageResult(state, float(loss_sum), False)
        params, opt_state = self.update_fn(state.params, state.opt_state, grad_sum)
        return StageResult(TrainState(params, opt_state), float(loss_sum), True)

    def collectives(self, accumulator: Any) -> tuple[CollectiveRecord, ...]:
        """One all-reduce (add, all replicas) of the gradient sum and the loss sum per step."""
        return (CollectiveRecord("all_reduce", self.method, "all", tree_nbytes(accumulator)),)
