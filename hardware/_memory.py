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
from typing import Any, NamedTuple

from hardware._layout import ReplicaLayout
from hardware._parameters import (
    CODE_BYTES_PER_OP_PER_TILE,
    DEFAULT_PREFETCH_DEPTH,
    EXCHANGE_CODE_BYTES_PER_TILE,
)
from hardware._planner_step import plan_profile
from hardware._specs import SystemSpec
from hardware._step_profile import StepProfile

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
    planner: Any = None

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


def memory_per_ipu(
    profile: StepProfile,
    layout: ReplicaLayout,
    system: SystemSpec,
    *,
    prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
    parameters: Any = None,
) -> MemoryBreakdown:
    """Peak bytes per IPU by category for ``profile`` run under ``layout`` on ``system``.

    A replica spanning k IPUs spreads every category evenly over them. Code is the vertex
    code of ``num_ops`` operations on every tile; exchange code grows with the log of the
    replica count for every collective; RTS divides the optimiser state by its sharding
    domain and offloading moves it to Streaming Memory; the infeed keeps the micro-batch
    being computed and ``prefetch_depth`` more in tile memory.
    """
    ipu = system.ipu
    k = layout.ipus_per_replica
    shards = optimiser_shards(profile, layout)
    optimiser = 0 if profile.offload_optimiser_state else profile.optimiser_state_bytes / shards
    accumulators = profile.gradient_bytes if profile.gradient_accumulation > 1 else 0
    rounds = 1 + math.ceil(math.log2(layout.num_replicas)) if layout.num_replicas > 1 else 0
    exchange = ipu.tiles * EXCHANGE_CODE_BYTES_PER_TILE * len(profile.collectives) * rounds
    # Tensors spread over the replica's k IPUs; code and exchange code are per IPU already.
    per_replica_tensors = {
        "weights": profile.parameter_bytes,
        "optimizer_state": optimiser,
        "gradient_accumulators": accumulators,
        "stream_buffers": (prefetch_depth + 1) * profile.host_bytes_per_micro_batch,
        "activations": profile.activation_bytes,
        "gradients": profile.gradient_bytes,
        "temporaries": profile.temporary_bytes,
    }
    categories = {name: math.ceil(value / k) for name, value in per_replica_tensors.items()}
    categories["code"] = math.ceil(profile.num_ops * CODE_BYTES_PER_OP_PER_TILE * ipu.tiles / k)
    categories["exchange_code"] = int(exchange)
    categories = {name: categories[name] for name in CATEGORIES}
    return with_planner(
        MemoryBreakdown(categories, ipu.in_processor_memory, ipu.tiles, ipu.sram_per_tile),
        profile,
        ipu,
        parameters,
        share=k,
    )


def with_planner(
    memory: MemoryBreakdown,
    profile: StepProfile,
    ipu,
    parameters=None,
    *,
    share: int = 1,
    ipu_index: int = 0,
    ops=None,
) -> MemoryBreakdown:
    """``memory`` with the convolution planner's choices (``hardware._planner``) charged.

    The chosen plans' temporary memory is the not-always-live peak of temporaries when it
    exceeds the profile's own; their extra code and exchange code are always live; the
    worst tile adds what the plans' layouts pile onto the first tiles. ``share`` IPUs
    share the operations (a replica sharded over them); ``ops`` replaces the profile's
    operations (one pipeline stage's, on IPU ``ipu_index``).
    """
    ops = profile.matmuls if ops is None else ops
    if not ops:
        return memory
    plans = plan_profile(profile, ipu, parameters, ipu_index=ipu_index, ops=ops)
    c = dict(memory.categories)
    c["temporaries"] = max(c["temporaries"], math.ceil(plans.temporary_bytes / share))
    c["code"] += math.ceil(plans.code_bytes / share)
    c["exchange_code"] += math.ceil(plans.exchange_code_bytes / share)
    mean_tile = sum(c.values()) / memory.tiles
    worst = math.ceil(mean_tile + plans.worst_tile_excess_bytes / share)
    return memory._replace(categories=c, worst_tile_bytes=worst, planner=plans)


class OutOfMemoryError(MemoryError):
    """The step does not fit in In-Processor-Memory; the message says why and what helps."""


def _remedies(profile: StepProfile, layout: ReplicaLayout, memory: MemoryBreakdown) -> list[str]:
    c = memory.categories
    remedies = []
    if profile.micro_batch_size > 1 and c["activations"] + c["temporaries"] > 0:
        remedies.append(
            f"a smaller micro-batch (--micro-batch-size {profile.micro_batch_size // 2}), with "
            "more gradient accumulation to keep the batch"
        )
    if not profile.recomputation and c["activations"] > 0:
        remedies.append("recomputation (checkpoint activations and recompute them backwards)")
    if (
        not profile.replicated_tensor_sharding
        and layout.num_replicas > 1
        and c["optimizer_state"] > 0
    ):
        remedies.append("replicated tensor sharding (RTS) of the optimiser state")
    if not profile.offload_optimiser_state and c["optimizer_state"] > 0:
        remedies.append("offloading the optimiser state to Streaming Memory")
    if layout.ipus_per_replica < 16:
        remedies.append(
            "pipelining the model over more IPUs "
            f"(--ipus-per-replica {layout.ipus_per_replica * 2})"
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
    profile: StepProfile, layout: ReplicaLayout, system: SystemSpec, memory: MemoryBreakdown
) -> str:
    """Poplar's ``Out of memory: ...`` refusal, with the breakdown and the remedies."""
    c = memory.categories
    lines = [
        f"Out of memory: {profile.name} at micro-batch {profile.micro_batch_size} needs "
        f"{memory.total:,} bytes per IPU ({memory.per_tile:,.0f} bytes per tile) but a "
        f"{system.ipu.name} has {memory.capacity:,} bytes of In-Processor-Memory "
        f"({memory.tile_capacity:,} bytes per tile x {memory.tiles} tiles).",
        f"  always-live {memory.always_live:,} bytes: "
        + ", ".join(f"{name} {c[name]:,}" for name in ALWAYS_LIVE),
        f"  not-always-live {memory.not_always_live:,} bytes: "
        + ", ".join(f"{name} {c[name]:,}" for name in NOT_ALWAYS_LIVE),
        *_planner_lines(memory),
        "Remedies: " + "; ".join(_remedies(profile, layout, memory)) + ".",
    ]
    return "\n".join(lines)


def check_memory(
    simulation_or_profile,
    layout: ReplicaLayout | None = None,
    system: SystemSpec | None = None,
) -> MemoryBreakdown:
    """The memory breakdown, or ``OutOfMemoryError`` exactly when it does not fit.

    Call it with a ``StepSimulation`` (``check_memory(sim)``) or with
    ``check_memory(profile, layout, system)``.

    Raises:
        OutOfMemoryError: when the breakdown does not fit; the message starts with Poplar's
            ``Out of memory:`` and lists the categories and the remedies that apply.
    """
    if layout is None and system is None and hasattr(simulation_or_profile, "memory"):
        sim = simulation_or_profile
        profile, layout, system, memory = sim.profile, sim.layout, sim.system, sim.memory
    elif layout is not None and system is not None:
        profile = simulation_or_profile
        memory = memory_per_ipu(profile, layout, system)
    else:
        raise TypeError(
            "check_memory takes a StepSimulation, or a StepProfile with `layout` and "
            f"`system`; got {type(simulation_or_profile).__name__} with layout={layout!r}."
        )
    if not memory.fits:
        raise OutOfMemoryError(out_of_memory_message(profile, layout, system, memory))
    return memory
