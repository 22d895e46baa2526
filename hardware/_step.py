"""A training step of one replica, whatever runs it: the model's one ``simulate_step``.

The step (host IO, gradient accumulation, collectives, update, streaming, host sync) is the
timeline of ``hardware._timeline``; the replica's compute is the schedule of its stages
(``hardware._pipeline``) and its memory is taken per IPU (``hardware._memory``): each IPU
holds its stages' weights, optimiser state, accumulators, code and activation stashes, and
``StepSimulation.memory`` is the fullest IPU's. A data-parallel replica is the one-stage
case: its micro-step's passes run back to back, ``gradient_accumulation`` of them per update,
with no bubble, and its one IPU holds everything.

References:
    Graphcore, "Memory and Performance Optimisation on the IPU", sections 3 (memory
    categories), 4.2 (pipelining) and 5.3 (recomputation); PopTorch User Guide,
    "Parallel execution" (PipelinedExecution, ShardedExecution).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hardware._layout import ReplicaLayout
from hardware._memory import MemoryBreakdown, replica_memory, worst_ipu
from hardware._parameters import DEFAULT_PREFETCH_DEPTH, ModelParameters, load_parameters
from hardware._pipeline import (
    PipelineSchedule,
    memory_counter,
    schedule_pipeline,
    stash_bytes,
    stash_entry_bytes,
)
from hardware._replica import ReplicaModel, as_replica, stage_costs
from hardware._specs import SystemSelectionError, SystemSpec
from hardware._step_profile import StepProfile
from hardware._step_simulation import TRACK_COMPUTE, StepSimulation, TimelineEvent, ipu_track
from hardware._timeline import (
    durations,
    exposed_host_times,
    host_link_seconds,
    samples_per_second,
    step_phases,
)


@dataclasses.dataclass(frozen=True)
class ReplicaReport:
    """The replica's part of a simulated step: its stages' passes and its IPUs' memory.

    Attributes:
        schedule: the simulated passes of one weight update.
        strategy: ``pipelined`` or ``sharded``; None for a data-parallel replica (one
            stage, its micro-step).
        recomputation: whether stages stash only their inputs and recompute.
        ipu_memory: peak bytes by category of each IPU of the replica (IPU 0 first), with
            all the stages it holds.
        stash_bytes: each stage's activation stash at its deepest (its own entries, plus the
            recomputation working set under recomputation).
        counters: IPU -> [(seconds, bytes live)] over one weight update.
    """

    schedule: PipelineSchedule
    strategy: str | None
    recomputation: bool
    ipu_memory: tuple[MemoryBreakdown, ...]
    stash_bytes: tuple[int, ...]
    counters: dict[int, list[tuple[float, int]]]

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
        return worst_ipu(self.ipu_memory)

    @property
    def stash_entries(self) -> tuple[int, ...]:
        """Each stage's stash entry per micro-batch (``stash_entry_bytes``)."""
        return tuple(stash_entry_bytes(s.stage, self.recomputation) for s in self.schedule.stages)

    def stages_on(self, ipu: int) -> tuple[int, ...]:
        """The stages IPU ``ipu`` runs, in pipeline order."""
        return tuple(k for k, s in enumerate(self.schedule.stages) if s.ipu == ipu)


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


def _expand_pipelines(
    events: Sequence[TimelineEvent], pipe: PipelineSchedule, ga: int
) -> tuple[TimelineEvent, ...]:
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


def simulate_step(
    replica: ReplicaModel | StepProfile,
    layout: ReplicaLayout,
    system: SystemSpec,
    *,
    parameters: ModelParameters | None = None,
    prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
) -> StepSimulation:
    """Simulated time and memory of one step of ``replica`` under ``layout`` on ``system``.

    ``replica`` is a ``ReplicaModel`` (its stages and the replica-wide profile), or a
    ``StepProfile``, the data-parallel replica of one compiled micro-step. Pure: the same
    inputs always give the same simulation; ``parameters`` default to the calibrated ones
    (``hardware/calibration.json``). Memory is not checked here: ``check_memory`` refuses a
    step that does not fit, as Poplar does at compile time.

    Raises:
        SystemSelectionError: the layout needs more IPUs than ``system`` has.
        ValueError: stages that the replica's IPUs cannot run, or too little gradient
            accumulation for a pipelined step.
    """
    model = as_replica(replica)
    profile = model.profile
    if layout.num_ipus > system.num_ipus:
        raise SystemSelectionError(
            f"the job needs {layout.num_ipus} IPUs but {system.name} has {system.num_ipus}: "
            "pick a larger --system or fewer replicas."
        )
    if prefetch_depth < 0:
        raise ValueError(f"`prefetch_depth` must be >= 0, got {prefetch_depth}.")
    model.check(layout.ipus_per_replica)
    params = parameters if parameters is not None else load_parameters()
    ipu = system.ipu
    # IPU s sends to IPU s + 1 over the IPU-Links between them; with the replica's IPUs on
    # one ring, half of an IPU's links face each neighbour (graphcore-facts.md section 4).
    link_bandwidth = ipu.ipu_link_bandwidth * max(ipu.ipu_links // 2, 1)
    costs = stage_costs(model, ipu, params)
    pipe = schedule_pipeline(
        costs,
        profile.gradient_accumulation,
        strategy=model.strategy or "sharded",  # no strategy: one micro-batch at a time
        schedule=model.schedule,
        link_bandwidth=link_bandwidth,
        link_latency=params.ipu_link_latency,
    )
    d = durations(profile, layout, system, params, pipe)
    events, step_seconds, exposed, exposed_host, run = exposed_host_times(
        d, profile, prefetch_depth
    )
    ga = profile.gradient_accumulation
    phases = step_phases(d, profile, exposed, exposed_host)
    # The IPUs' idle share of the pipeline's time is a phase of its own, so reports and the
    # scaling analysis can name it: ramp-up, ramp-down, waits on the slowest stage and the
    # IPU-Link exchanges between stages; under sharded execution, the (N - 1)/N of the time
    # each IPU waits while the others run the micro-batch. A lone stage has none.
    phases["pipeline_bubble"] = phases["compute"] * pipe.bubble_fraction
    phases["compute"] -= phases["pipeline_bubble"]
    memories = replica_memory(
        model, layout, system, prefetch_depth=prefetch_depth, parameters=params
    )
    n = len(model.stages)
    strategy = model.strategy or "sharded"
    report = ReplicaReport(
        pipe,
        model.strategy,
        model.recomputation,
        memories,
        tuple(
            stash_bytes(
                stage,
                k,
                n,
                strategy,
                model.schedule,
                recomputation=model.recomputation,
                ipus=[s.ipu for s in model.stages],
            )
            for k, stage in enumerate(model.stages)
        ),
        memory_counter(
            pipe,
            {i: memories[i].always_live for i in pipe.ipus},
            recomputation=model.recomputation,
        ),
    )
    if model.strategy is not None:  # each stage's passes on its IPU's track
        events, run = _expand_pipelines(events, pipe, ga), _expand_pipelines(run, pipe, ga)
    return StepSimulation(
        model=model,
        layout=layout,
        system=system,
        parameters=params,
        phases=phases,
        simulated_step_seconds=step_seconds,
        samples_per_second=samples_per_second(profile, layout, step_seconds),
        memory=memories[report.worst_ipu],
        host_io_exposed_seconds=exposed,
        host_io_seconds=host_link_seconds(d, profile),
        events=tuple(events),
        prefetch_depth=prefetch_depth,
        replica=report,
        host_compute_seconds=d.host,
        run_events=tuple(run),
    )
