"""Which reduce-and-update stage a trainer runs, what it costs, and its collectives anywhere.

The levers in ``Options`` pick the stage: replicated tensor sharding (RTS) swaps in the
sharded stage (reduce-scatter, owned-element update, all-gathers) with each local replica's
part of the optimiser state; offloading wraps the update so the state lives in streaming
memory between updates; otherwise the plain all-reduce stage runs. All three keep the
numbers of the plain path bit for bit. With RTS and offloading together the sharded parts
already stay on the host between updates, so only the accounting (:func:`lever_info`)
changes. Offline mode plans the same stage from shapes, with no state.

The stage's collectives depend on the layout (gcl resolves a method for a group's size; RTS
re-plans its shards for the replica and instance counts), so :func:`collectives_for_layout`
answers for any ``hardware.ReplicaLayout``: what a scaling sweep prices at each point.

References:
    PopART User Guide, "Tensor locations" (RTS and ``TensorStorage.OffChip``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

import jax

import hardware
from hardware import CollectiveRecord
from popdist_emu._options import Options
from popdist_emu._trees import tree_nbytes
from popdist_emu.programs import StepShapes
from popdist_emu.runtime._layerwise import layerwise_programs
from popdist_emu.runtime._offload import OffloadedUpdate, stream_out
from popdist_emu.runtime._reduce_update import AllReduceUpdate, ReduceUpdateStage
from popdist_emu.runtime._replica_step import Optimiser, Params, UpdateFn, init_state
from popdist_emu.runtime._sharded_update import (
    ShardedReduceUpdate,
    check_shardable,
    sharded_stage,
    sharded_state_nbytes,
)
from popdist_emu.runtime._sharding import ShardingPlan, plan_sharding

if TYPE_CHECKING:  # mpi4py.MPI initialises MPI when imported: only for the checker
    from mpi4py import MPI


class LeverInfo(NamedTuple):
    """The memory and traffic effect of RTS and optimiser offloading on one replica.

    Attributes:
        optimiser_state_bytes_per_replica: optimiser state kept on chip by the replica that
            holds the most (the whole state without RTS, about 1/k of it with RTS over a
            domain of k replicas, 0 when offloaded).
        sharding_domain_size: replicas an RTS shard spans (1 without RTS).
        offload_bytes_per_update: bytes streamed in and out of streaming memory by one
            weight update (0 without offloading).

    References:
        PopART User Guide, "Tensor locations" (RTS and ``TensorStorage.OffChip``).
    """

    optimiser_state_bytes_per_replica: int
    sharding_domain_size: int
    offload_bytes_per_update: int


class StageChoice(NamedTuple):
    """The stage a trainer runs, its initial optimiser state and its sharding plan.

    Attributes:
        stage: the reduce-and-update stage.
        opt_state: the initial optimiser state in the stage's form (sharded, streamed out
            or on the device); None offline.
        plan: the RTS sharding plan; None without RTS.
    """

    stage: ReduceUpdateStage
    opt_state: Any
    plan: ShardingPlan | None


class StepCollectives(NamedTuple):
    """The collectives of one weight update under a layout, and the RTS domain they imply.

    Attributes:
        collectives: the records the stage runs (``hardware.CollectiveRecord``).
        sharding_domain: replicas an RTS shard spans under the layout; 0 without RTS.
    """

    collectives: tuple[CollectiveRecord, ...]
    sharding_domain: int


def select_stage(
    optimiser: Optimiser,
    options: Options,
    update: UpdateFn,
    *,
    params: Params,
    offline: bool,
    comm: MPI.Comm | None = None,
    timeout: float | None = None,
    scale: float | None = None,
) -> StageChoice:
    """The reduce-and-update stage the levers ask for, and the initial optimiser state.

    Args:
        optimiser: the optax optimiser.
        options: the levers (RTS, its domain, offloading) and the layout.
        update: the compiled update the stage calls (``UpdateProgram``).
        params: the initial weights (values; shapes offline).
        offline: plan from shapes only: no state, no probe update.
        comm: mpi4py communicator of the instances; None is gcl's default.
        timeout: seconds a collective waits for a peer before raising.
        scale: what ``update`` multiplies the reduced gradient by (``update_scale``), for
            the two passes of a layer-wise optimiser under RTS.

    Raises:
        ShardingError: an RTS configuration PopART refuses, or an optimiser whose sharded
            update would differ from the whole-tensor update.
    """
    if options.replicated_tensor_sharding:
        if offline:
            plan = plan_sharding(
                params,
                domain=options.sharding_domain,
                num_replicas=options.num_total_replicas,
                num_instances=options.num_instances,
            )
            # Shapes only: the element-wise probe update needs values, so trace only.
            check_shardable(optimiser, params)
            stage = ShardedReduceUpdate(
                plan,
                update,
                options.replica_offset,
                comm=comm,
                timeout=timeout,
                layerwise=layerwise_programs(optimiser, scale),
            )
            return StageChoice(stage, None, plan)
        sharded, opt_state = sharded_stage(
            optimiser,
            params,
            update,
            layout=options.layout,
            instance=options.instance_index,
            domain=options.sharding_domain,
            comm=comm,
            timeout=timeout,
            scale=scale,
        )
        return StageChoice(sharded, opt_state, sharded.plan)
    replicas = options.num_total_replicas
    if options.offload_optimiser:
        offloaded = OffloadedUpdate(update)
        stage_ = AllReduceUpdate(offloaded, num_replicas=replicas, comm=comm, timeout=timeout)
        streamed = None if offline else stream_out(init_state(optimiser, params))
        return StageChoice(stage_, streamed, None)
    stage_ = AllReduceUpdate(update, num_replicas=replicas, comm=comm, timeout=timeout)
    return StageChoice(stage_, None if offline else init_state(optimiser, params), None)


def lever_info(
    optimiser: Optimiser, options: Options, plan: ShardingPlan | None, opt_state: Any
) -> LeverInfo:
    """What RTS and offloading buy and cost per replica, from shapes (offline too).

    Args:
        optimiser: the optax optimiser.
        options: whether the state is offloaded.
        plan: the RTS plan, or None without RTS.
        opt_state: the whole optimiser state's shapes.
    """
    if plan is not None:
        state_bytes = sharded_state_nbytes(optimiser, plan)
        domain = plan.domain_size
    else:
        state_bytes = tree_nbytes(opt_state)
        domain = 1
    if options.offload_optimiser:
        # The whole (or this replica's sharded part of the) state, in then out per update.
        return LeverInfo(0, domain, 2 * state_bytes)
    return LeverInfo(state_bytes, domain, 0)


def collectives_for_layout(
    stage: ReduceUpdateStage,
    options: Options,
    shapes: StepShapes,
    layout: hardware.ReplicaLayout,
) -> StepCollectives:
    """The collectives ``stage`` would run per update under ``layout``, and its RTS domain.

    The plain stage is re-recorded for the layout's replica count (gcl's method depends on
    the group's size); the sharded stage is re-planned for the layout's replicas and
    instances exactly as a trainer of that layout plans it offline.

    Raises:
        ShardingError: a layout the sharding plan refuses.
        TypeError: a stage other than the emulator's two, which records its collectives
            for its own layout only.
    """
    acc: jax.ShapeDtypeStruct = shapes.accumulator
    if isinstance(stage, ShardedReduceUpdate):
        plan = plan_sharding(
            shapes.params,
            domain=options.sharding_domain,
            num_replicas=layout.num_replicas,
            num_instances=layout.num_instances,
        )
        replanned = dataclasses.replace(stage, plan=plan)
        return StepCollectives(replanned.collectives(acc), plan.domain_size)
    if isinstance(stage, AllReduceUpdate):
        resized = dataclasses.replace(stage, num_replicas=layout.num_replicas)
        return StepCollectives(resized.collectives(acc), 0)
    raise TypeError(
        f"collectives_for_layout: `stage` is a {type(stage).__name__}, which records its "
        f"collectives for its own layout only; use AllReduceUpdate or ShardedReduceUpdate, or "
        f"simulate each layout with its own trainer."
    )
