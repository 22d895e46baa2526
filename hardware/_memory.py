"""IPU memory per category, and Poplar's out-of-memory refusal.

Memory is split as the Memory and Performance Optimisation guide and PopVision do:
always-live data holds its own region for the whole program (weights, optimiser state,
accumulators, vertex code, exchange code, infeed buffers); not-always-live data shares
addresses over time (activations kept for the backward pass, gradients, temporaries). The
model counts the peak as the sum of both, the conservative case where the largest
not-always-live tensors are live together.

References:
    Memory and Performance Optimisation guide, section 3 ("Mapping a model to an IPU
    system": code, tensors, exchange code and buffers) and section 7.7 ("Memory for more
    replicas"); PopVision Graph Analyser glossary (always-live, not-always-live).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from hardware._layout import ReplicaLayout
from hardware._parameters import (
    CODE_BYTES_PER_OP_PER_TILE,
    DEFAULT_PREFETCH_DEPTH,
    EXCHANGE_CODE_BYTES_PER_TILE,
    ModelParameters,
)
from hardware._pipeline import stash_depth, stash_entry_bytes
from hardware._planner import ConvOp
from hardware._planner_step import PlannerReport, plan_profile
from hardware._replica import ReplicaModel, as_replica
from hardware._specs import IpuSpec, SystemSpec
from hardware._step_profile import StepProfile

if TYPE_CHECKING:  # it imports this module
    from hardware._step_simulation import StepSimulation

ALWAYS_LIVE = (
    "weights",
    "optimizer_state",
    "gradient_accumulators",
    "code",
    "exchange_code",
    "stream_buffers",
)
NOT_ALWAYS_LIVE = ("activations", "gradients", "temporaries")
CATEGORIES = ALWAYS_LIVE + NOT_ALWAYS_LIVE


class MemoryBreakdown(NamedTuple):
    """Bytes per IPU by category, and what one IPU holds.

    Attributes:
        categories: category -> bytes per IPU (keys: ``CATEGORIES``).
        capacity: In-Processor-Memory per IPU, bytes.
        tiles: tiles per IPU.
        tile_capacity: bytes per tile.
        worst_tile_bytes: bytes of the fullest tile (the mean tile plus what the planner's
            layouts pile onto the first tiles); 0 when unknown (the mean is used).
        planner: the convolution planner's choices (``hardware._planner_step.PlannerReport``),
            or None when the step has no planned matmuls.
    """

    categories: dict[str, int]
    capacity: int
    tiles: int
    tile_capacity: int
    worst_tile_bytes: int = 0
    planner: PlannerReport | None = None

    @property
    def always_live(self) -> int:
        """Bytes that stay allocated for the whole program."""
        return sum(self.categories[c] for c in ALWAYS_LIVE)

    @property
    def not_always_live(self) -> int:
        """Bytes whose addresses are reused over the step (counted at their peak)."""
        return sum(self.categories[c] for c in NOT_ALWAYS_LIVE)

    @property
    def total(self) -> int:
        """Peak bytes per IPU."""
        return self.always_live + self.not_always_live

    @property
    def per_tile(self) -> float:
        """Mean bytes per tile, with the data spread evenly over the tiles."""
        return self.total / self.tiles

    @property
    def worst_tile(self) -> float:
        """Bytes of the fullest tile (never below the mean tile)."""
        return max(float(self.worst_tile_bytes), self.per_tile)

    @property
    def fits(self) -> bool:
        """Whether the IPU holds the peak, in total and on its fullest tile."""
        return self.total <= self.capacity and self.worst_tile <= self.tile_capacity


def optimiser_shards(profile: StepProfile, layout: ReplicaLayout) -> int:
    """Replicas the optimiser state is sharded over (1 without RTS)."""
    if not profile.replicated_tensor_sharding:
        return 1
    domain = profile.sharding_domain or layout.num_replicas
    return max(min(domain, layout.num_replicas), 1)


def _idle(ipu: IpuSpec) -> MemoryBreakdown:
    """An IPU of the replica that runs no stage (a data-parallel replica's IPUs after the
    first): it holds nothing."""
    zeros: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
    return MemoryBreakdown(zeros, ipu.in_processor_memory, ipu.tiles, ipu.sram_per_tile)


def ipu_memory(
    ipu_index: int,
    model: ReplicaModel,
    layout: ReplicaLayout,
    system: SystemSpec,
    *,
    prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
    parameters: ModelParameters | None = None,
) -> MemoryBreakdown:
    """Peak bytes by category on IPU ``ipu_index`` of the replica, which holds every stage
    placed on it.

    Their weights, state, accumulators, code and stashes add up; one working set is live at
    a time (the largest stage's temporaries, block gradient and recomputation). Code is the
    vertex code of the stages' operations on every tile; exchange code grows with the log
    of the replica count for every collective; RTS divides the optimiser state by its
    sharding domain and offloading moves it to Streaming Memory; the first stage's IPU keeps
    the micro-batch being computed and ``prefetch_depth`` more. The convolution planner's
    choices for the stages' matmuls and convolutions are charged to the IPU, planned with
    the replica's ``availableMemoryProportion`` for that IPU.
    """
    ipu, profile = system.ipu, model.profile
    mine = [(k, s) for k, s in enumerate(model.stages) if s.ipu == ipu_index]
    if not mine:
        return _idle(ipu)
    shards = optimiser_shards(profile, layout)
    rounds = 1 + math.ceil(math.log2(layout.num_replicas)) if layout.num_replicas > 1 else 0
    accumulating = profile.gradient_accumulation > 1
    recomputation, n = model.recomputation, len(model.stages)
    strategy = model.strategy or "sharded"  # no strategy: one micro-batch at a time
    # Each stage stashes its entries (only its input under recomputation); one stage at a
    # time recomputes, with its checkpoints and one block's activations live.
    ipus = [s.ipu for s in model.stages]  # consecutive stages on one IPU share a slot
    stash = sum(
        stash_depth(k, n, strategy, model.schedule, ipus) * stash_entry_bytes(s, recomputation)
        for k, s in mine
    )
    if recomputation:
        stash += max(s.checkpoint_bytes or s.activation_bytes for _, s in mine)
    state_bytes = sum(s.optimiser_state_bytes for _, s in mine)
    gradient_bytes = sum(s.gradient_bytes for _, s in mine)
    categories = {
        "weights": sum(s.parameter_bytes for _, s in mine),
        "optimizer_state": 0
        if profile.offload_optimiser_state
        else math.ceil(state_bytes / shards),
        "gradient_accumulators": gradient_bytes if accumulating else 0,
        "code": sum(s.code_ops for _, s in mine) * CODE_BYTES_PER_OP_PER_TILE * ipu.tiles,
        "exchange_code": ipu.tiles
        * EXCHANGE_CODE_BYTES_PER_TILE
        * len(profile.collectives)
        * rounds,
        "stream_buffers": (prefetch_depth + 1) * profile.host_bytes_per_micro_batch
        if any(k == 0 for k, _ in mine)
        else 0,
        "activations": stash,
        # Accumulated in place block by block (PopART adds each weight gradient into its
        # accumulator as it is produced); without accumulation the whole gradient is live.
        "gradients": max(s.block_gradient_bytes or s.gradient_bytes for _, s in mine)
        if accumulating
        else gradient_bytes,
        "temporaries": max(s.temporary_bytes for _, s in mine),
    }
    categories = {name: math.ceil(categories[name]) for name in CATEGORIES}
    memory = MemoryBreakdown(categories, ipu.in_processor_memory, ipu.tiles, ipu.sram_per_tile)
    ops = tuple(op for _, s in mine for op in s.matmuls)
    return with_planner(memory, profile, ipu, parameters, ipu_index=ipu_index, ops=ops)


def replica_memory(
    model: ReplicaModel,
    layout: ReplicaLayout,
    system: SystemSpec,
    *,
    prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
    parameters: ModelParameters | None = None,
) -> tuple[MemoryBreakdown, ...]:
    """The memory of every IPU of the replica (IPU 0 first)."""
    return tuple(
        ipu_memory(i, model, layout, system, prefetch_depth=prefetch_depth, parameters=parameters)
        for i in range(layout.ipus_per_replica)
    )


def worst_ipu(memories: Sequence[MemoryBreakdown]) -> int:
    """The IPU that holds the most bytes (the first of equals)."""
    totals = [m.total for m in memories]
    return totals.index(max(totals))


def memory_per_ipu(
    replica: ReplicaModel | StepProfile,
    layout: ReplicaLayout,
    system: SystemSpec,
    *,
    prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
    parameters: ModelParameters | None = None,
) -> MemoryBreakdown:
    """Peak bytes by category of the replica's fullest IPU for ``replica`` (a step profile
    is a data-parallel replica, whose one program runs on IPU 0) under ``layout``."""
    memories = replica_memory(
        as_replica(replica), layout, system, prefetch_depth=prefetch_depth, parameters=parameters
    )
    return memories[worst_ipu(memories)]


def with_planner(
    memory: MemoryBreakdown,
    profile: StepProfile,
    ipu: IpuSpec,
    parameters: ModelParameters | None = None,
    *,
    ipu_index: int = 0,
    ops: tuple[ConvOp, ...] = (),
) -> MemoryBreakdown:
    """``memory`` with the convolution planner's choices (``hardware._planner``) for ``ops``
    (the matmuls and convolutions of the stages on IPU ``ipu_index``) charged.

    The chosen plans' temporary memory is the not-always-live peak of temporaries when it
    exceeds the stages' own; their extra code and exchange code are always live; the
    worst tile adds what the plans' layouts pile onto the first tiles.
    """
    if not ops:
        return memory
    plans = plan_profile(profile, ipu, parameters, ipu_index=ipu_index, ops=ops)
    c = dict(memory.categories)
    c["temporaries"] = max(c["temporaries"], plans.temporary_bytes)
    c["code"] += plans.code_bytes
    c["exchange_code"] += plans.exchange_code_bytes
    mean_tile = sum(c.values()) / memory.tiles
    worst = math.ceil(mean_tile + plans.worst_tile_excess_bytes)
    return memory._replace(categories=c, worst_tile_bytes=worst, planner=plans)


class OutOfMemoryError(MemoryError):
    """The step does not fit in In-Processor-Memory; the message says why and what helps."""


def _which_stages(model: ReplicaModel, ipu: int) -> str:
    """``stage 0`` or ``stages 0 and 7``: the stages IPU ``ipu`` runs."""
    ks = [k for k, s in enumerate(model.stages) if s.ipu == ipu]
    return f"stage {ks[0]}" if len(ks) == 1 else "stages " + " and ".join(map(str, ks))


def _named_stages(model: ReplicaModel, ipu: int) -> str:
    """``stage 0: B0`` or ``stages 0 and 7: emb, L0, head``: what IPU ``ipu`` runs."""
    blocks = [b for s in model.stages if s.ipu == ipu for b in s.blocks]
    named = (
        ", ".join(blocks)
        if len(blocks) <= 6
        else f"{blocks[0]}, {blocks[1]} ... {blocks[-1]}, {len(blocks)} blocks"
    )
    return f"{_which_stages(model, ipu)}: {named}"


def _remedies(
    model: ReplicaModel,
    layout: ReplicaLayout,
    memories: Sequence[MemoryBreakdown],
    ipu: int,
) -> list[str]:
    """What would make IPU ``ipu`` fit, leaving out what the step already does."""
    profile, c = model.profile, memories[ipu].categories
    pipelined = model.strategy is not None
    remedies = []
    lightest = min(range(len(memories)), key=lambda i: memories[i].total)
    if pipelined and lightest != ipu:
        remedies.append(
            f"moving blocks of {_which_stages(model, ipu)} to IPU {lightest} "
            f"({_which_stages(model, lightest)}, {memories[lightest].total:,} bytes)"
        )
    smaller = profile.micro_batch_size > 1 and c["activations"] + c["temporaries"] > 0
    if smaller and not pipelined:
        remedies.append(
            f"a smaller micro-batch (--micro-batch-size {profile.micro_batch_size // 2}), with "
            "more gradient accumulation to keep the batch"
        )
    if not profile.recomputation and c["activations"] > 0:
        remedies.append(
            "recomputation (stash only each stage's input: --recompute)"
            if pipelined
            else "recomputation (checkpoint activations and recompute them backwards)"
        )
    if not profile.replicated_tensor_sharding and layout.num_replicas > 1 and c["optimizer_state"]:
        remedies.append("replicated tensor sharding (RTS) of the optimiser state")
    if not profile.offload_optimiser_state and c["optimizer_state"] > 0:
        remedies.append("offloading the optimiser state to Streaming Memory")
    if layout.ipus_per_replica < 16:
        more = f"--ipus-per-replica {layout.ipus_per_replica * 2}"
        remedies.append(
            f"more IPUs per replica ({more})"
            if pipelined
            else f"pipelining the model over more IPUs ({more})"
        )
    if smaller and pipelined:
        remedies.append(
            f"a smaller micro-batch (--micro-batch-size {profile.micro_batch_size // 2})"
        )
    return remedies


def _planner_lines(memory: MemoryBreakdown) -> list[str]:
    plans = memory.planner
    if plans is None:
        return []
    lines = [
        f"  worst tile {memory.worst_tile:,.0f} bytes of {memory.tile_capacity:,} "
        f"(mean tile {memory.per_tile:,.0f}); largest convolution/matmul temporary "
        f"{plans.worst_tile_temporary_bytes:,} bytes per tile"
    ]
    if plans.phase_two:
        lines.append(
            f"  {len(plans.phase_two)} operations were planned for minimum memory (phase two; "
            "the planner could not meet the memory target): their serialised plans pile "
            "operands onto few tiles; a higher --available-memory-proportion spreads them."
        )
    elif plans.temporary_bytes:
        lines.append(
            "  a lower --available-memory-proportion trades convolution/matmul temporary "
            "memory for cycles."
        )
    return lines


def out_of_memory_message(
    model: ReplicaModel,
    layout: ReplicaLayout,
    system: SystemSpec,
    memories: Sequence[MemoryBreakdown],
    ipu: int,
) -> str:
    """Poplar's ``Out of memory: ...`` refusal of IPU ``ipu`` of the replica, with its
    breakdown and the remedies (a pipelined replica's names the IPU and its stages)."""
    profile, memory = model.profile, memories[ipu]
    c = memory.categories
    what = f"{profile.name} at micro-batch {profile.micro_batch_size}"
    if model.strategy is not None:
        what = f"IPU {ipu} ({_named_stages(model, ipu)}) of {what}"
    if memory.total > memory.capacity:
        where = (
            f"needs {memory.total:,} bytes per IPU ({memory.per_tile:,.0f} bytes per tile) but "
            f"a {system.ipu.name} has {memory.capacity:,} bytes of In-Processor-Memory "
            f"({memory.tile_capacity:,} bytes per tile x {memory.tiles} tiles)."
        )
    else:
        where = (
            f"fits in total ({memory.total:,} of {memory.capacity:,} bytes) but its fullest "
            f"tile needs {memory.worst_tile:,.0f} bytes of {memory.tile_capacity:,}."
        )
    lines = [
        f"Out of memory: {what} {where}",
        f"  always-live {memory.always_live:,} bytes: "
        + ", ".join(f"{name} {c[name]:,}" for name in ALWAYS_LIVE),
        f"  not-always-live {memory.not_always_live:,} bytes: "
        + ", ".join(f"{name} {c[name]:,}" for name in NOT_ALWAYS_LIVE),
        *_planner_lines(memory),
        "Remedies: " + "; ".join(_remedies(model, layout, memories, ipu)) + ".",
    ]
    return "\n".join(lines)


def check_memory(
    simulation_or_replica: StepSimulation | ReplicaModel | StepProfile,
    layout: ReplicaLayout | None = None,
    system: SystemSpec | None = None,
) -> MemoryBreakdown:
    """The fullest IPU's memory, or ``OutOfMemoryError`` exactly when an IPU of the replica
    does not fit (the first such IPU is named).

    Call it with a ``StepSimulation`` (``check_memory(sim)``), or with a ``ReplicaModel``
    or a ``StepProfile`` and ``layout`` and ``system``.

    Raises:
        OutOfMemoryError: the message starts with Poplar's ``Out of memory:`` and lists the
            categories and the remedies that apply.
    """
    from hardware._step_simulation import StepSimulation  # it imports this module

    given = simulation_or_replica
    if isinstance(given, StepSimulation) and layout is None and system is None:
        model, layout, system = given.model, given.layout, given.system
        memories = given.replica.ipu_memory
    elif (
        isinstance(given, ReplicaModel | StepProfile) and layout is not None and system is not None
    ):
        model = as_replica(given)
        memories = replica_memory(model, layout, system)
    else:
        raise TypeError(
            "check_memory takes a StepSimulation, or a ReplicaModel or StepProfile with "
            f"`layout` and `system`; got {type(simulation_or_replica).__name__} with "
            f"layout={layout!r}."
        )
    for ipu, memory in enumerate(memories):
        if not memory.fits:
            raise OutOfMemoryError(out_of_memory_message(model, layout, system, memories, ipu))
    return memories[worst_ipu(memories)]
