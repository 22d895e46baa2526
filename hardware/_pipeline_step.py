"""A training step whose replica runs as a pipeline (or sharded) over its IPUs.

The step is the one ``simulate_step`` models (host IO, gradient accumulation, collectives,
update, streaming, host sync), with the compute of each weight update replaced by the
pipeline's schedule (``hardware._pipeline``) and the memory taken per IPU of the replica:
each IPU holds its stage's weights, optimiser state, accumulators, code and activation
stash; ``StepSimulation.memory`` is the worst IPU's.

References:
    Graphcore, "Memory and Performance Optimisation on the IPU", sections 3 (memory
    categories), 4.2 (pipelining) and 5.3 (recomputation); PopTorch User Guide,
    "Parallel execution" (PipelinedExecution, ShardedExecution).
"""

from __future__ import annotations

import dataclasses
import math

from hardware._compute import compute_seconds
from hardware._layout import ReplicaLayout
from hardware._memory import (
    ALWAYS_LIVE,
    CATEGORIES,
    NOT_ALWAYS_LIVE,
    MemoryBreakdown,
    OutOfMemoryError,
    optimiser_shards,
    with_planner,
)
from hardware._memory import _planner_lines as planner_lines
from hardware._parameters import (
    CODE_BYTES_PER_OP_PER_TILE,
    DEFAULT_PREFETCH_DEPTH,
    EXCHANGE_CODE_BYTES_PER_TILE,
    ModelParameters,
    load_parameters,
)
from hardware._pipeline import (
    PipelineSchedule,
    StageCost,
    memory_counter,
    schedule_pipeline,
    stash_bytes,
)
from hardware._specs import IpuSpec, SystemSelectionError, SystemSpec
from hardware._step_profile import StepProfile
from hardware._step_simulation import TRACK_COMPUTE, StepSimulation, TimelineEvent, ipu_track
from hardware._timeline import (
    _durations,
    exposed_host_times,
    host_link_seconds,
    samples_per_second,
    step_phases,
)


@dataclasses.dataclass(frozen=True)
class PipelineReport:
    """The pipeline part of a simulated step.

    Attributes:
        schedule: the simulated passes of one weight update.
        recomputation: whether stages stash only their inputs and recompute.
        stage_memory: peak bytes by category of each stage's IPU.
        stash_bytes: each stage's activation stash at its deepest.
        counters: IPU -> [(seconds, bytes live)] over one weight update.
    """

    schedule: PipelineSchedule
    recomputation: bool
    stage_memory: tuple[MemoryBreakdown, ...]
    stash_bytes: tuple[int, ...]
    counters: dict[int, list[tuple[float, int]]]

    @property
    def strategy(self) -> str:
        """``pipelined`` or ``sharded``."""
        return self.schedule.strategy

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the IPUs over a weight update's passes."""
        return self.schedule.bubble_fraction

    @property
    def balance(self) -> float:
        """Slowest stage over the mean stage."""
        return self.schedule.balance

    @property
    def worst_stage(self) -> int:
        """Index of the stage whose IPU holds the most bytes."""
        totals = [m.total for m in self.stage_memory]
        return totals.index(max(totals))


def stage_seconds(
    flops: float,
    bytes_accessed: float,
    transcendentals: float,
    num_ops: int,
    ipu: IpuSpec,
    precision: str,
    params: ModelParameters,
) -> float:
    """One pass of one stage on its single IPU (roofline plus compute-set cost)."""
    return compute_seconds(
        flops, bytes_accessed, transcendentals, ipu, precision, params, compute_sets=num_ops
    )


def stage_memory(
    stage: StageCost,
    position: int,
    stages: tuple[StageCost, ...],
    profile: StepProfile,
    layout: ReplicaLayout,
    system: SystemSpec,
    *,
    strategy: str,
    schedule: str = "grouped",
    recomputation: bool = False,
    prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
    parameters: ModelParameters | None = None,
) -> MemoryBreakdown:
    """Peak bytes by category on the IPU of stage ``position``, with the convolution
    planner's choices for the stage's matmuls and convolutions charged to that IPU (its
    ``availableMemoryProportion`` from the replica's setting for that IPU)."""
    ipu = system.ipu
    shards = optimiser_shards(profile, layout)
    rounds = 1 + math.ceil(math.log2(layout.num_replicas)) if layout.num_replicas > 1 else 0
    stash = stash_bytes(
        stage, position, len(stages), strategy, schedule, recomputation=recomputation
    )
    categories = {
        "weights": stage.parameter_bytes,
        "optimizer_state": 0
        if profile.offload_optimiser_state
        else math.ceil(stage.optimiser_state_bytes / shards),
        "gradient_accumulators": stage.gradient_bytes if profile.gradient_accumulation > 1 else 0,
        "code": stage.num_ops * CODE_BYTES_PER_OP_PER_TILE * ipu.tiles,
        "exchange_code": ipu.tiles
        * EXCHANGE_CODE_BYTES_PER_TILE
        * len(profile.collectives)
        * rounds,
        "stream_buffers": (prefetch_depth + 1) * profile.host_bytes_per_micro_batch
        if position == 0
        else 0,
        "activations": stash,
        # Accumulated in place block by block (PopART adds each weight gradient into its
        # accumulator as it is produced); without accumulation the whole gradient is live.
        "gradients": (stage.block_gradient_bytes or stage.gradient_bytes)
        if profile.gradient_accumulation > 1
        else stage.gradient_bytes,
        "temporaries": stage.temporary_bytes,
    }
    categories = {name: int(categories[name]) for name in CATEGORIES}
    memory = MemoryBreakdown(categories, ipu.in_processor_memory, ipu.tiles, ipu.sram_per_tile)
    return with_planner(
        memory, profile, ipu, parameters, ipu_index=stage.ipu, ops=tuple(stage.matmuls)
    )


def _remedies(report: PipelineReport, profile: StepProfile, layout: ReplicaLayout, s: int):
    memory = report.stage_memory[s]
    c = memory.categories
    remedies = []
    lightest = min(range(len(report.stage_memory)), key=lambda i: report.stage_memory[i].total)
    if lightest != s:
        remedies.append(
            f"moving blocks of stage {s} to IPU {report.schedule.stages[lightest].ipu} "
            f"(stage {lightest}, {report.stage_memory[lightest].total:,} bytes)"
        )
    if not report.recomputation and c["activations"] > 0:
        remedies.append("recomputation (stash only each stage's input: --recompute)")
    if not profile.replicated_tensor_sharding and layout.num_replicas > 1 and c["optimizer_state"]:
        remedies.append("replicated tensor sharding (RTS) of the optimiser state")
    if not profile.offload_optimiser_state and c["optimizer_state"] > 0:
        remedies.append("offloading the optimiser state to Streaming Memory")
    if layout.ipus_per_replica < 16:
        remedies.append(f"more IPUs per replica (--ipus-per-replica {layout.ipus_per_replica * 2})")
    if profile.micro_batch_size > 1 and c["activations"] + c["temporaries"] > 0:
        remedies.append(
            f"a smaller micro-batch (--micro-batch-size {profile.micro_batch_size // 2})"
        )
    return remedies


def check_pipeline_memory(sim: StepSimulation) -> None:
    """Raises ``OutOfMemoryError`` naming the first IPU and stage that do not fit."""
    report: PipelineReport = sim.pipeline
    for s, memory in enumerate(report.stage_memory):
        if memory.fits:
            continue
        stage = report.schedule.stages[s]
        c = memory.categories
        blocks = stage.blocks
        named = (
            ", ".join(blocks)
            if len(blocks) <= 6
            else (f"{blocks[0]}, {blocks[1]} ... {blocks[-1]}, {len(blocks)} blocks")
        )
        where = (
            f"needs {memory.total:,} bytes but a {sim.system.ipu.name} has "
            f"{memory.capacity:,} bytes of In-Processor-Memory."
            if memory.total > memory.capacity
            else f"fits in total ({memory.total:,} of {memory.capacity:,} bytes) but its "
            f"fullest tile needs {memory.worst_tile:,.0f} bytes of {memory.tile_capacity:,}."
        )
        lines = [
            f"Out of memory: IPU {stage.ipu} (stage {s}: {named}) of "
            f"{sim.profile.name} at micro-batch {sim.profile.micro_batch_size} {where}",
            "  always-live: " + ", ".join(f"{n} {c[n]:,}" for n in ALWAYS_LIVE),
            "  not-always-live: " + ", ".join(f"{n} {c[n]:,}" for n in NOT_ALWAYS_LIVE),
            *planner_lines(memory),
            "Remedies: " + "; ".join(_remedies(report, sim.profile, sim.layout, s)) + ".",
        ]
        raise OutOfMemoryError("\n".join(lines))


def _pipeline_events(
    pipe: PipelineSchedule, offset: float, about: tuple = ()
) -> list[TimelineEvent]:
    """One weight update's passes from ``offset``: each stage's forward (``F3``), backward
    (``B3``) and IPU-Link exchange on its IPU's track, with the stage, its blocks and the
    micro-batch as arguments (``about``: the step's)."""
    out = []
    stage_of_ipu = {s.ipu: i for i, s in enumerate(pipe.stages)}
    for e in pipe.events:
        name = {"forward": "F", "backward": "B", "transfer": "IPU-Link "}[e.kind]
        stage = stage_of_ipu[e.ipu]
        cost = pipe.stages[stage]
        args = (
            *about,
            ("stage", stage),
            ("blocks", ", ".join(cost.blocks)),
            ("micro_batch", e.micro_batch),
            ("pass", e.kind),
        )
        if e.kind == "transfer":
            args += (("bytes", cost.output_bytes),)
        out.append(
            TimelineEvent(
                ipu_track(e.ipu), f"{name}{e.micro_batch}", offset + e.start, e.duration, args
            )
        )
    return out


def _expand_pipelines(events, pipe: PipelineSchedule, ga: int) -> tuple[TimelineEvent, ...]:
    """The step's compute intervals replaced by the pipeline's passes: one pipeline per
    weight update, drawn from the update's first compute interval."""
    out, seen = [], 0
    for event in events:
        if event.track == TRACK_COMPUTE and event.name == "compute":
            if seen % ga == 0:
                step = tuple(a for a in event.args if a[0] == "step")
                out.extend(_pipeline_events(pipe, event.start, step))
            seen += 1
            continue
        out.append(event)
    return tuple(out)


def simulate_pipeline_step(
    profile: StepProfile,
    stages: tuple[StageCost, ...],
    layout: ReplicaLayout,
    system: SystemSpec,
    *,
    strategy: str = "pipelined",
    schedule: str = "grouped",
    recomputation: bool = False,
    parameters: ModelParameters | None = None,
    prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
) -> StepSimulation:
    """Simulated time and memory of one step whose replica runs ``stages``.

    ``profile`` describes the whole replica (host bytes, collectives, update, optimiser
    state); ``stages`` give the per-IPU costs. Memory is not checked here: call
    ``check_pipeline_memory`` (Poplar refuses at compile time).

    Raises:
        SystemSelectionError: when the layout needs more IPUs than ``system`` has.
        ValueError: when the stages do not match the replica's IPUs.
    """
    if layout.num_ipus > system.num_ipus:
        raise SystemSelectionError(
            f"the job needs {layout.num_ipus} IPUs but {system.name} has {system.num_ipus}: "
            "pick a larger --system or fewer replicas."
        )
    if len(stages) != layout.ipus_per_replica:
        raise ValueError(
            f"{len(stages)} stages for {layout.ipus_per_replica} IPUs per replica: place one "
            "stage on each IPU of the replica."
        )
    params = parameters if parameters is not None else load_parameters()
    ipu = system.ipu
    # IPU s sends to IPU s + 1 over the IPU-Links between them; with the replica's IPUs on
    # one ring, half of an IPU's links face each neighbour (graphcore-facts.md section 4).
    link_bandwidth = ipu.ipu_link_bandwidth * max(ipu.ipu_links // 2, 1)
    pipe = schedule_pipeline(
        stages,
        profile.gradient_accumulation,
        strategy=strategy,
        schedule=schedule,
        link_bandwidth=link_bandwidth,
        link_latency=params.ipu_link_latency,
    )
    d = _durations(profile, layout, system, params)
    accumulate = max(3 * s.gradient_bytes / ipu.memory_bandwidth for s in stages)
    d = d._replace(
        compute=pipe.seconds / profile.gradient_accumulation,
        accumulate=accumulate if profile.gradient_accumulation > 1 else 0.0,
    )
    events, step_seconds, exposed, exposed_host, run = exposed_host_times(
        d, profile, prefetch_depth
    )
    ga = profile.gradient_accumulation
    out = _expand_pipelines(events, pipe, ga)
    phases = step_phases(d, profile, exposed, exposed_host)
    # The IPUs' idle share of the pipeline's time is a phase of its own, so reports and the
    # scaling analysis can name it: ramp-up, ramp-down, waits on the slowest stage and the
    # IPU-Link exchanges between stages; under sharded execution, the (N - 1)/N of the time
    # each IPU waits while the others run the micro-batch.
    phases["pipeline_bubble"] = phases["compute"] * pipe.bubble_fraction
    phases["compute"] -= phases["pipeline_bubble"]

    memories = tuple(
        stage_memory(
            stage,
            i,
            tuple(stages),
            profile,
            layout,
            system,
            strategy=strategy,
            schedule=schedule,
            recomputation=recomputation,
            prefetch_depth=prefetch_depth,
            parameters=params,
        )
        for i, stage in enumerate(stages)
    )
    stashes = tuple(m.categories["activations"] for m in memories)
    base = tuple(m.always_live for m in memories)
    report = PipelineReport(
        pipe,
        recomputation,
        memories,
        stashes,
        memory_counter(pipe, base, recomputation=recomputation),
    )
    return StepSimulation(
        profile=profile,
        layout=layout,
        system=system,
        parameters=params,
        phases=phases,
        simulated_step_seconds=step_seconds,
        samples_per_second=samples_per_second(profile, layout, step_seconds),
        memory=memories[report.worst_stage],
        host_io_exposed_seconds=exposed,
        host_io_seconds=host_link_seconds(d, profile),
        events=out,
        prefetch_depth=prefetch_depth,
        pipeline=report,
        host_compute_seconds=d.host,
        run_events=_expand_pipelines(run, pipe, ga),
    )
