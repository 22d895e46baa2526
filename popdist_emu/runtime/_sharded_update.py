"""The RTS reduce-and-update stage and the sharded optimiser state it keeps.

Runs a :class:`ShardingPlan` (see ``popdist_emu.runtime._sharding`` for the
plan and why the collectives are composed this way): each local replica keeps only its owned
elements of every state leaf that mirrors a sharded parameter, as host arrays between updates;
the stage reduce-scatters the flat accumulators, updates the owned elements and all-gathers the
parameters, bit-identical to the all-reduce path.

References:
    PopART User Guide, "Tensor locations" (replicated tensor sharding). Rajbhandari et al.,
    "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

import gcl
from hardware import CollectiveRecord, ReplicaLayout
from popdist_emu.runtime._elementwise import check_elementwise
from popdist_emu.runtime._layerwise import (
    LayerwiseOptimiser,
    LayerwisePrograms,
    layerwise_programs,
    norms_from_squares,
    owned_squares,
)
from popdist_emu.runtime._reduce_update import StageResult, resolved_record
from popdist_emu.runtime._replica_step import (
    Accumulator,
    Optimiser,
    TrainState,
    UpdateFn,
    init_state,
)
from popdist_emu.runtime._sharding import ShardingPlan, plan_sharding, state_mirrors

if TYPE_CHECKING:  # mpi4py.MPI initialises MPI when imported: only for the checker
    from mpi4py import MPI


class ShardedOptState(NamedTuple):
    """Under RTS, what each local replica holds of the optimiser state: of every state leaf
    that mirrors a sharded parameter, only the elements the replica owns (1-D host arrays);
    other leaves whole.

    Attributes:
        shards: per local replica, the state's leaves (in ``jax.tree_util`` order).
        treedef: the full optimiser state's structure.
        shapes: the full state leaves' shapes.
        mirrors: for each state leaf, the parameter leaf it mirrors, or None.
    """

    shards: tuple[tuple[np.ndarray, ...], ...]
    treedef: Any
    shapes: tuple[tuple[int, ...], ...]
    mirrors: tuple[int | None, ...]


def shard_state(plan: ShardingPlan, state: Any, replicas: Sequence[int]) -> ShardedOptState:
    """Each replica's part of a full optimiser state (host copies)."""
    leaves, treedef = jax.tree_util.tree_flatten(state)
    mirrors = state_mirrors(plan, state)
    shards = tuple(
        tuple(
            np.array(x, copy=True) if m is None else plan.take(m, r, x)
            for x, m in zip(leaves, mirrors, strict=True)
        )
        for r in replicas
    )
    shapes = tuple(tuple(np.shape(x)) for x in leaves)
    return ShardedOptState(shards, treedef, shapes, mirrors)


def unshard_state(
    plan: ShardingPlan, state: ShardedOptState, replicas: Sequence[int], which: Sequence[int]
) -> Any:
    """A full-shape optimiser state from the shards ``which`` (indices into ``state.shards``)
    of ``replicas``; elements none of them owns are zero."""
    out = []
    for idx, (shape, m) in enumerate(zip(state.shapes, state.mirrors, strict=True)):
        first = state.shards[which[0]][idx]
        if m is None:
            out.append(first)
            continue
        full = np.zeros(math.prod(shape), first.dtype)
        for r, i in zip(replicas, which, strict=True):
            plan.put(m, r, state.shards[i][idx], full)
        out.append(full.reshape(shape))
    return state.treedef.unflatten(out)


def init_sharded_state(
    optimiser: Optimiser, plan: ShardingPlan, params: Any, replicas: Sequence[int]
) -> ShardedOptState:
    """``optimiser.init(params)``, each given global replica keeping only its part."""
    # One compiled init, not one compile per leaf operation.
    return shard_state(plan, init_state(optimiser, params), replicas)


def sharded_state_nbytes(optimiser: Optimiser, plan: ShardingPlan) -> int:
    """Optimiser-state bytes of the replica holding the most under ``plan`` (shapes only)."""
    shapes = plan.treedef.unflatten(
        [jax.ShapeDtypeStruct(s, d) for s, d in zip(plan.shapes, plan.dtypes, strict=True)]
    )
    state = jax.eval_shape(optimiser.init, shapes)
    leaves = jax.tree_util.tree_leaves(state)
    mirrors = state_mirrors(plan, state)
    return max(
        sum(
            (math.prod(x.shape) if m is None else plan.owned(m, p)) * np.dtype(x.dtype).itemsize
            for x, m in zip(leaves, mirrors, strict=True)
        )
        for p in range(plan.domain_size)
    )


# -- the sharded reduce-and-update stage ---------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ShardedReduceUpdate:
    """The RTS reduce-and-update stage: reduce-scatter, sharded update, all-gather.

    Drops in for the runtime's ``AllReduceUpdate`` (same call signature, flat accumulators of
    ``F`` gradient elements then the loss, and ``collectives``); ``state.opt_state`` is a
    :class:`ShardedOptState`. Parameters come out bit-identical to the all-reduce path (see
    the module docstring for why this composition).

    The emulator computes the update of the local replicas of one domain in ONE call of the
    runtime's compiled ``update_fn`` on full-shape arrays, their owned elements filled in and
    the rest zero (and discarded): the same executable as the all-reduce path, so each owned
    element goes through the same instructions and rounds the same. Updating 1-D shards
    instead would compile different programs, and XLA's fusion choices (e.g. whether Adam's
    scalar bias correction is computed once or fused into the loop) change the last bits.
    The simulated IPU time still charges each replica a 1/k update.

    Args:
        plan: which leaves are sharded and the domain size.
        update_fn: the runtime's ``(params, opt_state, grad_flat) -> (params, opt_state)``
            (it may donate its inputs).
        replica_offset: global index of this instance's first replica.
        method: GCL method of the runtime's all-reduce (the reduce-scatter must match it).
        comm: mpi4py communicator of the instances; None is gcl's default.
        timeout: seconds before a missing peer raises ``gcl.CollectiveTimeout``.
        layerwise: the two compiled passes of a layer-wise optimiser (LAMB, LARS), whose
            per-tensor norms are all-reduced over the sharding domain between them
            (``layerwise_programs``); None for an element-wise optimiser, updated by
            ``update_fn`` alone.
    """

    plan: ShardingPlan
    update_fn: UpdateFn
    replica_offset: int = 0
    method: str = "auto"
    comm: Any = None
    timeout: float | None = None
    layerwise: LayerwisePrograms | None = None

    def __call__(self, state: TrainState, replica_sums: Sequence[Accumulator]) -> StageResult:
        plan, kw = self.plan, {"comm": self.comm, "timeout": self.timeout}
        s, k, d = plan.chunk, plan.domain_size, plan.num_domains
        any_sharded = any(plan.sharded)
        replicas = [self.replica_offset + i for i in range(len(replica_sums))]
        # 1. One reduce-scatter of exactly what the all-reduce path reduces: the same order.
        chunks = gcl.reduce_scatter(
            list(replica_sums), "add", method=self.method, group=gcl.All(), **kw
        )
        dtype = chunks[0].dtype
        # Whole leaves, the loss and a finite flag: each element is written by its one owner,
        # -inf elsewhere, so the max over replicas copies it exactly.
        marks = []
        for r, chunk in zip(replicas, chunks, strict=True):
            mark = np.full(plan.whole_elements + 2, -np.inf, dtype)
            for lo, at, n in plan.whole_runs(r):
                mark[at : at + n] = chunk[lo : lo + n]
            mark[-1] = 0 if np.isfinite(chunk).all() else 1
            marks.append(mark)
        merged = gcl.all_reduce(marks, "max", group=gcl.All(), **kw)[0]
        loss_sum = float(merged[-2])
        if merged[-1] > 0:
            return StageResult(state, loss_sum, False)
        # 2. Several domains: copy the chunks of the same position of every domain.
        if d > 1 and any_sharded:
            spec = jax.ShapeDtypeStruct((d * s,), dtype)
            buffers = gcl.all_gather(chunks, like=spec, group=gcl.Orthogonal(d), **kw)
        else:
            buffers = chunks
        # 3. One full-shape update per domain present here, owned elements filled in.
        opt_state = state.opt_state
        if not isinstance(opt_state, ShardedOptState):
            raise TypeError(
                f"ShardedReduceUpdate: the state holds a {type(opt_state).__name__}, not the "
                "ShardedOptState this stage's init gives; start from the stage's own state."
            )
        new_shards: list[Any] = [None] * len(replicas)
        owned_params: list[list[np.ndarray]] = [[] for _ in replicas]
        groups = _by_domain(replicas, k)
        new_leaves: list[Any] = []  # every domain's update gives the same weights
        inputs = []
        for group in groups:
            grads = np.zeros(sum(plan.sizes), dtype)
            for i in group:
                self._fill_gradient(grads, replicas[i], buffers[i], merged)
            members = [replicas[i] for i in group]
            full_state = unshard_state(plan, opt_state, members, group)
            full_state = jax.tree_util.tree_map(jax.numpy.array, full_state)
            params = jax.tree_util.tree_map(lambda x: jax.numpy.array(x, copy=True), state.params)
            inputs.append((params, full_state, grads))
        if self.layerwise is None:
            updated = [self.update_fn(*args) for args in inputs]
        else:
            updated = self._layerwise_updates(groups, replicas, inputs)
        for group, (new_params, new_state) in zip(groups, updated, strict=True):
            members = [replicas[i] for i in group]
            for i, shard in zip(group, shard_state(plan, new_state, members).shards, strict=True):
                new_shards[i] = shard
            new_leaves = plan.treedef.flatten_up_to(new_params)
            for i in group:
                owned_params[i] = [plan.take(j, replicas[i], x) for j, x in enumerate(new_leaves)]
        # 4. All-gather the updated owned elements within the domain into full parameters.
        out = [jax.numpy.asarray(x) for x in new_leaves]
        if any_sharded:
            pieces = []
            for r, owned in zip(replicas, owned_params, strict=True):
                buffer = np.zeros(d * s, dtype)
                for leaf, runs in enumerate(plan.pieces(r)):
                    at = 0
                    for p in runs:
                        buffer[p.buffer_start : p.buffer_start + p.length] = owned[leaf][
                            at : at + p.length
                        ]
                        at += p.length
                pieces.append(buffer)
            spec = jax.ShapeDtypeStruct((k * d * s,), dtype)
            gathered = gcl.all_gather(pieces, like=spec, group=gcl.Consecutive(k), **kw)[0]
            flat = gathered.reshape(k, d, s).transpose(1, 0, 2).reshape(-1)
            for leaf, (start, size) in enumerate(zip(plan.offsets, plan.sizes, strict=True)):
                if plan.sharded[leaf]:
                    values = flat[start : start + size].reshape(plan.shapes[leaf])
                    out[leaf] = jax.device_put(values.astype(plan.dtypes[leaf]))
        new_opt_state = opt_state._replace(shards=tuple(new_shards))
        result = TrainState(plan.treedef.unflatten(out), new_opt_state)
        return StageResult(result, loss_sum, True)

    def _layerwise_updates(
        self,
        groups: list[list[int]],
        replicas: list[int],
        inputs: list[tuple[Any, Any, np.ndarray]],
    ) -> list[tuple[Any, Any]]:
        """A layer-wise optimiser's update of each domain here: the element-wise direction,
        the per-tensor squared norms of each replica's elements all-reduced over the sharding
        domain, then the trust ratio and the tail (``popdist_emu.runtime._layerwise``)."""
        plan, lw = self.plan, self.layerwise
        assert lw is not None
        directions, squares = [], [np.zeros(0)] * len(replicas)
        for group, (params, full_state, grads) in zip(groups, inputs, strict=True):
            inner_state, ratio_state, tail_state = full_state
            u, inner_state = lw.direction(params, inner_state, grads)
            directions.append((params, u, (inner_state, ratio_state, tail_state)))
            for i in group:
                squares[i] = owned_squares(plan, replicas[i], params, u)
        summed = gcl.all_reduce(
            squares,
            "add",
            group=gcl.Consecutive(plan.domain_size),
            comm=self.comm,
            timeout=self.timeout,
        )
        out = []
        for group, (params, u, (inner_state, ratio_state, tail_state)) in zip(
            groups, directions, strict=True
        ):
            norms = norms_from_squares(np.asarray(summed[group[0]]))
            new_params, tail_state = lw.finish(params, u, norms, tail_state)
            out.append((new_params, (inner_state, ratio_state, tail_state)))
        return out

    def _fill_gradient(
        self, grads: np.ndarray, r: int, buffer: np.ndarray, merged: np.ndarray
    ) -> None:
        """Writes replica ``r``'s reduced gradient elements (its chunks, and every whole leaf
        from ``merged``) into the flat ``grads``."""
        plan, w = self.plan, 0
        for leaf, (start, size) in enumerate(zip(plan.offsets, plan.sizes, strict=True)):
            if plan.sharded[leaf]:
                for p in plan.pieces(r)[leaf]:
                    at = start + p.leaf_start
                    grads[at : at + p.length] = buffer[p.buffer_start : p.buffer_start + p.length]
            else:
                grads[start : start + size] = merged[w : w + size]
                w += size

    def collectives(
        self, accumulator: jax.ShapeDtypeStruct | jax.Array
    ) -> tuple[CollectiveRecord, ...]:
        """The collectives one call runs, from the flat accumulator's shape, for the cost
        model (``hardware.CollectiveRecord``, with the method gcl resolves, as
        ``AllReduceUpdate``'s): reduce-scatter, the small all-reduce (max) of whole leaves,
        loss and flag, and the all-gathers (bytes of the gathered result, as the record
        defines)."""
        plan = self.plan
        d, k = plan.num_domains, plan.domain_size
        replicas = plan.num_replicas
        itemsize = np.dtype(accumulator.dtype).itemsize
        size = math.prod(accumulator.shape) * itemsize
        marks = (plan.whole_elements + 2) * itemsize
        records = [
            resolved_record("reduce_scatter", self.method, gcl.All(), size, replicas),
            resolved_record("all_reduce", "auto", gcl.All(), marks, replicas),
        ]
        if any(plan.sharded):
            chunk = plan.chunk * itemsize
            if d > 1:
                records.append(
                    resolved_record("all_gather", "auto", gcl.Orthogonal(d), d * chunk, replicas)
                )
            records.append(
                resolved_record("all_gather", "auto", gcl.Consecutive(k), k * d * chunk, replicas)
            )
        if self.layerwise is not None:
            # The per-tensor squared norms of the weights and the direction, two per leaf.
            squares = 2 * len(plan.sizes) * itemsize
            records.insert(
                2, resolved_record("all_reduce", "auto", gcl.Consecutive(k), squares, replicas)
            )
        return tuple(records)


def _by_domain(replicas: Sequence[int], k: int) -> list[list[int]]:
    """Indices into ``replicas`` grouped by sharding domain, in order."""
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(replicas):
        groups.setdefault(r // k, []).append(i)
    return list(groups.values())


def sharded_stage(
    optimiser: Optimiser,
    params: Any,
    update_fn: UpdateFn,
    *,
    layout: ReplicaLayout,
    instance: int,
    domain: gcl.All | gcl.Consecutive | gcl.Orthogonal | int | None = None,
    min_elements: int | None = None,
    method: str = "auto",
    comm: MPI.Comm | None = None,
    timeout: float | None = None,
    scale: float | None = None,
) -> tuple[ShardedReduceUpdate, ShardedOptState]:
    """Everything a runtime needs to train with RTS: the stage and the initial sharded state.

    Plans the sharding, refuses optimisers whose sharded update would differ, and gives each
    local replica its part of ``optimiser.init(params)``. The parts are host arrays between
    updates, so combined with optimiser offloading nothing changes here: only the cost model
    moves them to streaming memory (``offload_traffic`` of one replica's part, per update).

    ``scale`` is the one ``update_fn`` applies to the reduced gradient (see
    ``make_update``): a layer-wise optimiser's two passes apply it too.

    Args:
        layout: the job's replicas and instances (the sharding plan spans all of them).
        instance: this instance: its replicas get their parts of the state.

    Returns:
        ``(stage, opt_state)``: use ``stage`` as the reduce-and-update stage and
        ``TrainState(params, opt_state)`` as the initial state.
    """
    plan = plan_sharding(
        params,
        num_replicas=layout.num_replicas,
        num_instances=layout.num_instances,
        domain=domain,
        min_elements=min_elements,
    )
    check_shardable(optimiser, params, plan)
    replicas = layout.replicas_of_instance(instance)
    state = init_sharded_state(optimiser, plan, params, replicas)
    stage = ShardedReduceUpdate(
        plan,
        update_fn,
        replicas.start,
        method,
        comm,
        timeout,
        layerwise_programs(optimiser, scale),
    )
    return stage, state


def check_shardable(optimiser: Optimiser, params: Any, plan: ShardingPlan | None = None) -> None:
    """Refuses an optimiser whose sharded update would differ from the whole-tensor update:
    an element-wise optimiser, or a layer-wise one whose two element-wise parts are.

    Raises:
        ShardingError: as ``check_elementwise``.
    """
    if isinstance(optimiser, LayerwiseOptimiser):
        check_elementwise(optimiser.inner, params, plan)
        check_elementwise(optimiser.tail, params, plan)
    else:
        check_elementwise(optimiser, params, plan)
