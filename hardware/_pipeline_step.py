"""A training step whose replica runs as a pipeline (or sharded) over its IPUs.

The step is the one ``simulate_step`` models (host IO, gradient accumulation, collectives,
update, streaming, host sync), with the compute of each weight update replaced by the
pipeline's schedule (``hardware._pipeline``) and the memory taken per IPU of the replica:
each IPU holds its stages' weights, optimiser state, accumulators, code and activation
stashes; ``StepSimulation.memory`` is the worst IPU's.

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
    stash_depth,
    stash_entry_bytes,
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
        ipu_memory: peak bytes by category of each IPU of the replica (IPU 0 first), with
            all the stages it holds.
        stash_bytes: each stage's activation stash at its deepest (its own entries, plus the
            recomputation working set under recomputation).
        counters: IPU -> [(seconds, bytes live)] over one weight update.
    """

    schedule: PipelineSchedule
    recomputation: bool
    ipu_memory: tuple[MemoryBreakdown, ...]
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
        """Busiest IPU over the mean IPU."""
        return self.schedule.balance

    @property
    def stage_memory(self) -> tuple[MemoryBreakdown, ...]:
        """Each stage's IPU's memory (the same object for stages that share an IPU)."""
        return tuple(self.ipu_memory[s.ipu] for s in self.schedule.stages)

    @property
    def worst_ipu(self) -> int:
        """The IPU that holds the most bytes."""
        totals = [m.total for m in self.ipu_memory]
        return totals.index(max(totals))

    @property
    def stash_entries(self) -> tuple[int, ...]:
        """Each stage's stash entry per micro-batch (``stash_entry_bytes``)."""
        return tuple(stash_entry_bytes(s, self.recomputation) for s in self.schedule.stages)

    def stages_on(self, ipu: int) -> tuple[int, ...]:
        """The stages IPU ``ipu`` runs, in pipeline order."""
        return tuple(k for k, s in enumerate(self.schedule.stages) if s.ipu == ipu)


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


def ipu_memory(
    ipu_index: int,
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
    """Peak bytes by category on IPU ``ipu_index`` of the replica, which holds every stage
    placed on it: their weights, state, accumulators, code and stashes add up; one working
    set is live at a time (the largest stage's temporaries, block gradient and
    recomputation); the convolution planner's choices for their matmuls and convolutions
    are charged to the IPU (its ``availableMemoryProportion`` from the replica's setting
    for that IPU)."""
    ipu = system.ipu
    mine = [(k, s) for k, s in enumerate(stages) if s.ipu == ipu_index]
    if not mine:
        raise ValueError(f"no stage runs on IPU {ipu_index}.")
    shards = optimiser_shards(profile, layout)
    rounds = 1 + math.ceil(math.log2(layout.num_replicas)) if layout.num_replicas > 1 else 0
    accumulating = profile.gradient_accumulation > 1
    # Each stage stashes its entries (only its input under recomputation); one stage at a
    # time recomputes, with its checkpoints and one block's activations live.
    stash = sum(
        stash_depth(k, len(stages), strategy, schedule) * stash_entry_bytes(s, recomputation)
        for k, s in mine
    )
    if recomputation:
        stash += max(s.checkpoint_bytes or s.activation_bytes for _, s in mine)
    parameter_bytes = sum(s.parameter_bytes for _, s in mine)
    state_bytes = sum(s.optimiser_state_bytes for _, s in mine)
    gradient_bytes = sum(s.gradient_bytes for _, s in mine)
    categories = {
        "weights": parameter_bytes,
        "optimizer_state": 0
        if profile.offload_optimiser_state
        else math.ceil(state_bytes / shards),
        "gradient_accumulators": gradient_bytes if accumulating else 0,
        "code": sum(s.num_ops for _, s in mine) * CODE_BYTES_PER_OP_PER_TILE * ipu.tiles,
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
    categories = {name: int(categories[name]) for name in CATEGORIES}
    memory = MemoryBreakdown(categories, ipu.in_processor_memory, ipu.tiles, ipu.sram_per_tile)
    ops = tuple(op for _, s in mine for op in s.matmuls)
    return with_planner(memory, profile, ipu, parameters, ipu_index=ipu_index, ops=ops)


def _remedies(report: PipelineReport, profile: StepProfile, layout: ReplicaLayout, ipu: int):
    memory = report.ipu_memory[ipu]
    c = memory.categories
    remedies = []
    lightest = min(range(len(report.ipu_memory)), key=lambda i: report.ipu_memory[i].total)
    if lightest != ipu:
        remedies.append(
            f"moving blocks of {_which_stages(report, ipu)} to IPU {lightest} "
            f"({_which_stages(report, lightest)}, {report.ipu_memory[lightest].total:,} bytes)"
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


def _which_stages(report: PipelineReport, ipu: int) -> str:
    """``stage 0`` or ``stages 0 and 7``: the stages IPU ``ipu`` runs."""
    ks = report.stages_on(ipu)
    return f"stage {ks[0]}" if len(ks) == 1 else "stages " + " and ".join(map(str, ks))


def _named_stages(report: PipelineReport, ipu: int) -> str:
    """``stage 0: B0`` or ``stages 0 and 7: emb, L0, head``: what IPU ``ipu`` runs."""
    blocks = [b for k in report.stages_on(ipu) for b in report.schedule.stages[k].blocks]
    named = (
        ", ".join(blocks)
        if len(blocks) <= 6
        else f"{blocks[0]}, {blocks[1]} ... {blocks[-1]}, {len(blocks)} blocks"
    )
    return f"{_which_stages(report, ipu)}: {named}"


def check_pipeline_memory(sim: StepSimulation) -> None:
    """Raises ``OutOfMemoryError`` naming the first IPU, its stages and the remedies, when
    an IPU of the replica does not fit."""
    report: PipelineReport = sim.pipeline
    for ipu, memory in enumerate(report.ipu_memory):
        if memory.fits:
            continue
        c = memory.categories
        where = (
            f"needs {memory.total:,} bytes but a {sim.system.ipu.name} has "
            f"{memory.capacity:,} bytes of In-Processor-Memory."
            if memory.total > memory.capacity
            else f"fits in total ({memory.total:,} of {memory.capacity:,} bytes) but its "
            f"fullest tile needs {memory.worst_tile:,.0f} bytes of {memory.tile_capacity:,}."
        )
        lines = [
            f"Out of memory: IPU {ipu} ({_named_stages(report, ipu)}) of "
            f"{sim.profile.name} at micro-batch {sim.profile.micro_batch_size} {where}",
            "  always-live: " + ", ".join(f"{n} {c[n]:,}" for n in ALWAYS_LIVE),
            "  not-always-live: " + ", ".join(f"{n} {c[n]:,}" for n in NOT_ALWAYS_LIVE),
            *planner_lines(memory),
            "Remedies: " + "; ".join(_remedies(report, sim.profile, sim.layout, ipu)) + ".",
        ]
        raise OutOfMemoryError("\n".join(lines))


def _pipeline_events(
    pipe: PipelineSchedule, offset: float, about: tuple = ()
) -> list[TimelineEvent]:
    """One weight update's passes from ``offset``: each stage's forward (``F3``), backward
    (``B3``) and IPU-Link exchange on its IPU's track, with the stage, its blocks and the
    micro-batch as arguments (``about``: the step's)."""
    out = []
    for e in pipe.events:
        name = {"forward": "F", "backward": "B", "transfer": "IPU-Link "}[e.kind]
        stage = e.stage
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
    state); ``stages`` give the per-stage costs and IPUs (several stages may share one).
    Memory is not checked here: call ``check_pipeline_memory`` (Poplar refuses at compile
    time).

    Raises:
        SystemSelectionError: when the layout needs more IPUs than ``system`` has.
        ValueError: when the stages do not match the replica's IPUs.
    """
    if layout.num_ipus > system.num_ipus:
        raise SystemSelectionError(
            f"the job needs {layout.num_ipus} IPUs but {system.name} has {system.num_ipus}: "
            "pick a larger --system or fewer replicas."
        )
    used = sorted({s.ipu for s in stages})
    if used != list(range(layout.ipus_per_replica)):
        raise ValueError(
            f"{len(stages)} stages on IPUs {used} for {layout.ipus_per_replica} IPUs per "
            f"replica: place at least one stage on each IPU 0..{layout.ipus_per_replica - 1} "
            "of the replica, and none beyond."
        )
    params = parameters if parameters is not None else load_parameters(model=profile.name)
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
    accumulate = max(
        3 * sum(s.gradient_bytes for s in stages if s.ipu == i) / ipu.memory_bandwidth
        for i in range(layout.ipus_per_replica)
    )
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
        ipu_memory(
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
        for i in range(layout.ipus_per_replica)
    )
    n = len(stages)
    stashes = tuple(
        stash_bytes(stage, k, n, strategy, schedule, recomputation=recomputation)
        for k, stage in enumerate(stages)
    )
    report = PipelineReport(
        pipe,
        recomputation,
        memories,
        stashes,
        memory_counter(
            pipe, {i: m.always_live for i, m in enumerate(memories)}, recomputation=recomputation
        ),
    )
    return StepSimulation(
        profile=profile,
        layout=layout,
        system=system,
        parameters=params,
        phases=phases,
        simulated_step_seconds=step_seconds,
        samples_per_second=samples_per_second(profile, layout, step_seconds),
        memory=memories[report.worst_ipu],
        host_io_exposed_seconds=exposed,
        host_io_seconds=host_link_seconds(d, profile),
        events=out,
        prefetch_depth=prefetch_depth,
        pipeline=report,
        host_compute_seconds=d.host,
        run_events=_expand_pipelines(run, pipe, ga),
    )
