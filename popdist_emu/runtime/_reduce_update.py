"""The reduce-and-update stage of a step: one replaceable function.

After the local replicas have accumulated their gradients, this stage combines them over all
replicas of the job with ``gcl.all_reduce`` and applies the same optimiser update, so every
replica ends the step with identical parameters. The gradient sum and the loss sum travel in
one collective, so the step's global loss costs no extra round trip.

Replicated tensor sharding and optimiser offloading replace this stage as a whole (reduce-
scatter, sharded update, all-gather): anything with the :class:`ReduceUpdateStage` call
signature plugs into :class:`~popdist_emu.Trainer`. The stage in use is the one producer of
the step's collective records (``collectives``), each with the method gcl resolves for it
(``gcl.collective_method``), so the hardware model prices exactly what the emulator runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

import jax
import numpy as np

import gcl  # JAX- and MPI-free at import: offline mode imports it and never calls MPI
from hardware import CollectiveRecord
from popdist_emu._trees import tree_nbytes
from popdist_emu.runtime._replica_step import Accumulator, TrainState, UpdateFn

if TYPE_CHECKING:  # mpi4py.MPI initialises MPI when imported: only for the checker
    from mpi4py import MPI


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

    def collectives(
        self, accumulator: jax.ShapeDtypeStruct | jax.Array
    ) -> tuple[CollectiveRecord, ...]:
        """The collectives one call runs (``hardware.CollectiveRecord``, with the method gcl
        resolves), from the flat accumulator's shape alone."""
        ...


def resolved_record(
    kind: str,
    method: str,
    group: gcl.All | gcl.Consecutive | gcl.Orthogonal,
    nbytes: int,
    num_replicas: int | None,
) -> CollectiveRecord:
    """The record of a collective as gcl will run it: ``method`` resolved for the size and
    the group's size among ``num_replicas`` (left as requested when that is unknown)."""
    if num_replicas is not None:
        method = gcl.collective_method(kind, nbytes, group.size(num_replicas), method)
    return CollectiveRecord(kind, method, gcl.group_name(group), int(nbytes))


@dataclasses.dataclass(frozen=True)
class AllReduceUpdate:
    """Data-parallel reduction: all-reduce (sum) the accumulators, then update.

    Args:
        update_fn: the jitted ``(params, opt_state, grad_flat) -> (params, opt_state)``.
        method: GCL method for the all-reduce.
        comm: mpi4py communicator of the instances; None is gcl's private default.
        timeout: seconds before a missing peer raises ``gcl.CollectiveTimeout``.
        num_replicas: replicas of the job, so the records carry the method gcl resolves
            (``auto`` depends on the group size); None leaves ``method`` as given.
    """

    update_fn: UpdateFn
    method: str = "auto"
    comm: MPI.Comm | None = None
    timeout: float | None = None
    num_replicas: int | None = None

    def __call__(self, state: TrainState, replica_sums: Sequence[Accumulator]) -> StageResult:
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

    def collectives(
        self, accumulator: jax.ShapeDtypeStruct | jax.Array
    ) -> tuple[CollectiveRecord, ...]:
        """One all-reduce (add, all replicas) of the gradient sum and the loss sum per step."""
        nbytes = tree_nbytes(accumulator)
        return (resolved_record("all_reduce", self.method, gcl.All(), nbytes, self.num_replicas),)
