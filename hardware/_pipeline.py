"""Model parallelism over the IPUs of a replica: the pipeline schedule, its time and memory.

A replica of ``N`` IPUs runs ``K`` stages, each on one of its IPUs: usually stage ``s`` on
IPU ``s`` (``K = N``), but a stage may run on any IPU and several stages may share one, as
PopTorch's ``ipu_id`` and PopART's virtual graphs allow (Graphcore's MLPerf BERT puts its
embeddings, the first encoder layer and the tied masked-LM head, the pipeline's last
stage, on IPU 0: the pipeline "wraps round"). The schedule follows the stages' order;
an IPU runs, within a cycle, every pass of every stage it holds, one after the other, and
only activations that change IPU cross the IPU-Links. Two strategies:

* ``pipelined``, the grouped schedule of the Memory and Performance Optimisation guide
  (section 4.2, Fig. 4.1): time runs in BSP cycles; in cycle ``c`` IPU ``s`` runs the
  forward pass of micro-batch ``c - s`` and the backward pass of micro-batch
  ``c - 2N + 1 + s`` (each when it exists), then the activations and gradients produced in
  the cycle cross the IPU-Links in one exchange. A cycle lasts as long as its busiest IPU
  (the slowest stage paces the steady state) plus its transfers. With ``GA`` micro-batches
  the step has ``GA + 2K - 1`` cycles; the first ``K`` only fill (ramp-up), the last ``K``
  only drain (ramp-down). For balanced stages the idle share of the IPUs' time is
  ``(N - 1) / (GA + N - 1)``, which falls as gradient accumulation grows (the guide: the
  pipeline "works best when the gradient accumulation factor is much greater than the
  number of stages, since 2N stages are always under-utilised"; the PopTorch pipelining
  tutorial: full utilisation after 2N+1 steps).
* ``sharded``: one micro-batch at a time, stage after stage, forward then backward; only
  one IPU works at any time (the TensorFlow "Model parallelism with sharding" note).

Consecutive stages on one IPU run in one pipeline cycle, as PopART runs them ("if the two
sets of virtual graph IDs overlap, execute the current pipeline stage with the previous
one": ``Pipeline::withStages``): Graphcore's BERT, GPT-2 and ViT begin a stage at every
encoder layer (``AutoStage.AutoIncrement``), 15 stages on 4 IPUs for BERT-Base, which
PopART pipelines as 5 (:func:`pipeline_slots`). ``K`` below counts these slots.

The activation stash of slot ``s`` (0-based) holds ``2(K - s) + 1`` micro-batches'
activations for the grouped schedule, as the guide states (2N+1 on the first IPU,
2(N-1)+1 on the second, and so on, for one stage per IPU), ``K + 1`` for the interleaved
schedule, and one for sharded execution; every stage of a slot keeps that many entries
(PopART sizes a stash by the slots between its stage's forward and backward), and an IPU
holds the stashes of all its stages.
With recomputation each stashed entry is only the stage's input, plus,
while the backward pass recomputes one micro-batch, a checkpoint at every block boundary
and the activations of one block at a time (guide section 5.3, "Activation
recomputations" and 5.3.2, "Recomputation checkpoints").

References:
    Graphcore, "Memory and Performance Optimisation on the IPU", sections 4.2 (pipeline
    execution scheme, grouped and interleaved schedules, FIFO depths) and 5.3
    (recomputation); Graphcore tutorials, "PopTorch: pipelining" (ramp-up, 2N+1 steps);
    Graphcore, "Model Parallelism on the IPU with TensorFlow: Sharding and Pipelining";
    Huang et al., "GPipe", NeurIPS 2019 (bubble fraction (N-1)/(M+N-1)); graphcore/popart,
    ``willow/src/transforms/pipeline.cpp`` (``Pipeline::withStages``,
    ``PipelineInfo::numIndependentStages``: the fill and flush cycles and the stash sizes
    count the stages that do not run together).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from hardware._stage import StageProfile

STRATEGIES = ("pipelined", "sharded")
SCHEDULES = ("grouped", "interleaved")


class StageCost(NamedTuple):
    """One stage priced on its IPU: what it holds and how long its passes take.

    Attributes:
        stage: the stage's counts and bytes (``hardware.StageProfile``).
        forward_seconds: one micro-batch's forward pass.
        backward_seconds: one micro-batch's backward pass (including any recomputation).
    """

    stage: StageProfile
    forward_seconds: float
    backward_seconds: float

    @property
    def ipu(self) -> int:
        """The IPU of the replica it runs on."""
        return self.stage.ipu

    @property
    def blocks(self) -> tuple[str, ...]:
        """The blocks it holds, in order."""
        return self.stage.blocks

    @property
    def output_bytes(self) -> int:
        """Activations it sends to the next stage per micro-batch."""
        return self.stage.output_bytes


class PipelineEvent(NamedTuple):
    """One interval on one IPU of the replica.

    Attributes:
        ipu: the IPU (0-based within the replica).
        kind: ``forward``, ``backward`` or ``transfer`` (an IPU-Link exchange it sends).
        micro_batch: the micro-batch (0-based within the weight update).
        start: seconds from the start of the pipeline.
        duration: seconds.
        stage: the stage whose pass (or whose exchange) it is.
    """

    ipu: int
    kind: str
    micro_batch: int
    start: float
    duration: float
    stage: int = 0


def check_strategy(strategy: str, schedule: str = "grouped") -> None:
    """Raises ValueError for an unknown strategy or schedule."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is unknown: use one of {STRATEGIES}.")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r} is unknown: use one of {SCHEDULES}.")


def pipeline_slots(ipus: Sequence[int]) -> tuple[int, ...]:
    """Each stage's pipeline slot, given the stages' IPUs in pipeline order: a stage on the
    IPU of the stage before it runs in that stage's slot (PopART's ``withStages``), any
    other in the next. One stage per IPU: slot ``s`` is stage ``s``."""
    slots: list[int] = []
    for k, ipu in enumerate(ipus):
        slots.append(slots[-1] if k and ipu == ipus[k - 1] else len(set(slots)))
    return tuple(slots)


def stash_depth(
    position: int,
    num_stages: int,
    strategy: str,
    schedule: str = "grouped",
    ipus: Sequence[int] | None = None,
) -> int:
    """Micro-batches whose activations stage ``position`` keeps for its backward pass.

    Grouped: ``2(K - s) + 1`` for slot ``s`` of ``K`` (:func:`pipeline_slots` of ``ipus``,
    the stages' IPUs; without them each stage is a slot); interleaved: ``K + 1``; sharded:
    1 (MPO section 4.2). A single stage is no pipeline: each micro-batch's backward follows
    its forward, so it keeps one micro-batch, as a data-parallel replica does.
    """
    check_strategy(strategy, schedule)
    if not 0 <= position < num_stages:
        raise ValueError(f"stage {position} is outside 0..{num_stages - 1}.")
    if ipus is not None and len(ipus) != num_stages:
        raise ValueError(f"{len(ipus)} IPUs given for {num_stages} stages: give one per stage.")
    if strategy == "sharded" or num_stages == 1:
        return 1
    slots = pipeline_slots(ipus) if ipus is not None else tuple(range(num_stages))
    count = slots[-1] + 1
    if schedule == "interleaved":
        return count + 1
    return 2 * (count - slots[position]) + 1


def min_gradient_accumulation(num_stages: int, strategy: str) -> int:
    """The least gradient accumulation a training step with ``num_stages`` stages accepts.

    PopTorch refuses a pipelined training model whose gradient accumulation is below its
    number of pipeline stages, counting that a model with N stages "will have an additional
    N - 1 stages when training" (the backward stages; the last IPU's forward and backward
    are one): the rule is ``gradientAccumulation >= 2N - 1``. Source: PopTorch,
    ``popart_compiler/source/Compiler.cpp`` (github.com/graphcore/poptorch), the error
    "poptorch.Options().Training.gradientAccumulation must be greater than or equal to the
    number of pipeline stages (2N - 1) when using poptorch.PipelinedExecution", checked
    against PopART's ``accumulationFactor``. Sharded execution has no such rule.
    """
    check_strategy(strategy)
    return 2 * num_stages - 1 if strategy == "pipelined" and num_stages > 1 else 1


def ramp_bubble_fraction(num_stages: int, gradient_accumulation: int) -> float:
    """Idle share of a balanced grouped pipeline: ``(N - 1) / (GA + N - 1)``."""
    return (num_stages - 1) / (gradient_accumulation + num_stages - 1)


def program_order(
    num_stages: int,
    gradient_accumulation: int,
    strategy: str,
    ipus: Sequence[int] | None = None,
) -> list[tuple[int, int, str, int]]:
    """The passes of one weight update as ``(cycle, stage, kind, micro_batch)``, in order.

    Within a cycle every stage runs its forward before its backward (grouped); the stages
    of one slot (``ipus``: the stages' IPUs, :func:`pipeline_slots`) run in the same
    cycles. The runtime executes the passes in this order, so the numerics follow the
    schedule. One stage is no pipeline: each micro-batch's forward, then its backward.
    """
    check_strategy(strategy)
    n, ga = num_stages, gradient_accumulation
    order = []
    if strategy == "sharded" or n == 1:
        cycle = 0
        for m in range(ga):
            for s in range(n):
                order.append((cycle, s, "forward", m))
                cycle += 1
            for s in reversed(range(n)):
                order.append((cycle, s, "backward", m))
                cycle += 1
        return order
    slots = pipeline_slots(ipus) if ipus is not None else tuple(range(n))
    for c in range(ga + 2 * (slots[-1] + 1) - 1):
        order.extend(_cycle_passes(slots, ga, c))
    return order


@dataclasses.dataclass(frozen=True)
class PipelineSchedule:
    """The simulated passes of one weight update over the replica's IPUs.

    Attributes:
        strategy: ``pipelined`` or ``sharded``.
        schedule: ``grouped`` (the only one simulated) for pipelined; ``grouped`` for sharded.
        stages: the stages' costs, in pipeline order.
        gradient_accumulation: micro-batches per weight update.
        events: every forward, backward and transfer, per IPU.
        seconds: wall time of the update's passes.
        transfer_seconds: time of the exchanges on the critical path.
    """

    strategy: str
    schedule: str
    stages: tuple[StageCost, ...]
    gradient_accumulation: int
    events: tuple[PipelineEvent, ...]
    seconds: float
    transfer_seconds: float

    @property
    def ipus(self) -> tuple[int, ...]:
        """The IPUs the stages run on, each once, in increasing order."""
        return tuple(sorted({s.ipu for s in self.stages}))

    @property
    def busy_seconds(self) -> tuple[float, ...]:
        """Compute seconds of each IPU (in :attr:`ipus` order) over the update: the passes of
        all its stages."""
        ga = self.gradient_accumulation
        work = dict.fromkeys(self.ipus, 0.0)
        for s in self.stages:
            work[s.ipu] += ga * (s.forward_seconds + s.backward_seconds)
        return tuple(work[i] for i in self.ipus)

    @property
    def micro_batch_seconds(self) -> float:
        """The update's passes per micro-batch: a lone stage's forward and backward, back to
        back (what a data-parallel replica's micro-step takes), else the pipeline's time
        over its micro-batches."""
        if len(self.stages) == 1:
            stage = self.stages[0]
            return stage.forward_seconds + stage.backward_seconds
        return self.seconds / self.gradient_accumulation

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the IPUs' time: ``1 - sum(busy) / (IPUs * seconds)``; none for a
        lone stage, whose passes run back to back."""
        if self.seconds <= 0 or len(self.stages) == 1:
            return 0.0
        return max(1.0 - sum(self.busy_seconds) / (len(self.ipus) * self.seconds), 0.0)

    @property
    def balance(self) -> float:
        """Busiest IPU over the mean IPU (1.0 = perfectly balanced); with one stage per IPU,
        the slowest stage over the mean stage."""
        work = self.busy_seconds
        mean = sum(work) / len(work)
        return max(work) / mean if mean > 0 else 1.0


def _link_seconds(nbytes: float, link_bandwidth: float, link_latency: float) -> float:
    return link_latency + nbytes / link_bandwidth if nbytes > 0 else 0.0


def _boundary_seconds(
    stages: tuple[StageCost, ...], link_bandwidth: float, link_latency: float
) -> list[float]:
    """Seconds to move stage ``s``'s output to stage ``s + 1`` (and its gradient back): an
    IPU-Link exchange when the two run on different IPUs, nothing when they share one."""
    return [
        _link_seconds(s.output_bytes, link_bandwidth, link_latency)
        if k + 1 < len(stages) and stages[k + 1].ipu != s.ipu
        else 0.0
        for k, s in enumerate(stages)
    ]


def schedule_pipeline(
    stages: tuple[StageCost, ...] | list[StageCost],
    gradient_accumulation: int,
    *,
    strategy: str = "pipelined",
    schedule: str = "grouped",
    link_bandwidth: float,
    link_latency: float = 0.0,
) -> PipelineSchedule:
    """Simulates one weight update's passes over the stages.

    Args:
        stages: one ``StageCost`` per stage, in pipeline order; each names its IPU, and
            several may name the same one.
        gradient_accumulation: micro-batches per weight update.
        strategy: ``pipelined`` (grouped BSP cycles) or ``sharded``.
        schedule: ``grouped``; ``interleaved`` changes only the stash depths (its
            timing is not simulated).
        link_bandwidth: bytes/s an IPU sends to its neighbour (its IPU-Links to it).
        link_latency: seconds per exchange (the fitted IPU-Link latency).
    """
    check_strategy(strategy, schedule)
    stages = tuple(stages)
    if not stages:
        raise ValueError("a pipeline needs at least one stage.")
    if gradient_accumulation < 1:
        raise ValueError(f"gradient_accumulation must be >= 1, got {gradient_accumulation}.")
    n, ga = len(stages), gradient_accumulation
    xfer = _boundary_seconds(stages, link_bandwidth, link_latency)
    events: list[PipelineEvent] = []
    t, transfers = 0.0, 0.0
    if strategy == "sharded" or n == 1:
        for _, s, kind, m in program_order(n, ga, strategy):
            stage = stages[s]
            seconds = stage.forward_seconds if kind == "forward" else stage.backward_seconds
            events.append(PipelineEvent(stage.ipu, kind, m, t, seconds, s))
            t += seconds
            # A forward sends its output down, a backward its input's gradient back up.
            boundary = s if kind == "forward" else s - 1
            cost = xfer[boundary] if 0 <= boundary < n - 1 else 0.0
            if cost > 0:
                events.append(PipelineEvent(stage.ipu, "transfer", m, t, cost, s))
                t += cost
                transfers += cost
        return PipelineSchedule(strategy, schedule, stages, ga, tuple(events), t, transfers)
    slots = pipeline_slots([stage.ipu for stage in stages])
    for c in range(ga + 2 * (slots[-1] + 1) - 1):
        cursor = {stage.ipu: t for stage in stages}  # each IPU runs its passes in turn
        first_send: dict[int, tuple[int, int]] = {}  # IPU -> (micro-batch, stage) it sends
        exchange = 0.0
        for _, s, kind, m in _cycle_passes(slots, ga, c):
            stage = stages[s]
            seconds = stage.forward_seconds if kind == "forward" else stage.backward_seconds
            events.append(PipelineEvent(stage.ipu, kind, m, cursor[stage.ipu], seconds, s))
            cursor[stage.ipu] += seconds
            boundary = s if kind == "forward" else s - 1
            if 0 <= boundary < n - 1 and xfer[boundary] > 0:
                exchange = max(exchange, xfer[boundary])
                first_send.setdefault(stage.ipu, (m, s))
        length = max(cursor.values()) - t
        for ipu, (m, s) in first_send.items():
            events.append(PipelineEvent(ipu, "transfer", m, t + length, exchange, s))
        t += length + exchange
        transfers += exchange
    return PipelineSchedule(strategy, schedule, stages, ga, tuple(events), t, transfers)


def _cycle_passes(
    slots: tuple[int, ...], gradient_accumulation: int, cycle: int
) -> list[tuple[int, int, str, int]]:
    """The passes of one grouped cycle, as :func:`program_order` lists them: stage ``s``
    in slot ``slots[s]`` of ``K`` runs the forward of micro-batch ``c - slot`` and the
    backward of ``c - 2K + 1 + slot``."""
    ga, c, k = gradient_accumulation, cycle, slots[-1] + 1
    stages = range(len(slots))
    forwards = [(c, s, "forward", c - slots[s]) for s in stages if 0 <= c - slots[s] < ga]
    backwards = [
        (c, s, "backward", c - 2 * k + 1 + slots[s])
        for s in reversed(stages)
        if 0 <= c - 2 * k + 1 + slots[s] < ga
    ]
    return forwards + backwards


def stash_entry_bytes(stage: StageProfile, recomputation: bool) -> int:
    """One micro-batch's entry in a stage's stash: under recomputation its input and the
    values the program checkpoints inside it, else what its forward saves for its backward."""
    if recomputation:
        return stage.input_bytes + stage.stashed_checkpoint_bytes
    return stage.activation_bytes


def stash_bytes(
    stage: StageProfile,
    position: int,
    num_stages: int,
    strategy: str,
    schedule: str = "grouped",
    *,
    recomputation: bool = False,
    ipus: Sequence[int] | None = None,
) -> int:
    """Bytes of stage ``position``'s activation stash at its deepest (``ipus``: the
    stages' IPUs, which decide the slots; :func:`stash_depth`)."""
    depth = stash_depth(position, num_stages, strategy, schedule, ipus)
    working = (stage.checkpoint_bytes or stage.activation_bytes) if recomputation else 0
    return depth * stash_entry_bytes(stage, recomputation) + working


def memory_counter(
    pipeline: PipelineSchedule, base_bytes: dict[int, int], *, recomputation: bool = False
) -> dict[int, list[tuple[float, int]]]:
    """Bytes live on each IPU over the update: the always-live part (``base_bytes`` by IPU)
    plus the stashes of its stages.

    A micro-batch's stash entry is allocated when its forward pass starts and freed when
    its backward pass ends (PopVision's liveness view, per IPU).
    """
    entry = [stash_entry_bytes(s.stage, recomputation) for s in pipeline.stages]
    changes: dict[int, list[tuple[float, int]]] = {ipu: [] for ipu in pipeline.ipus}
    for e in pipeline.events:
        if e.kind == "forward":
            changes[e.ipu].append((e.start, entry[e.stage]))
        elif e.kind == "backward":
            changes[e.ipu].append((e.start + e.duration, -entry[e.stage]))
    counters = {}
    for ipu in pipeline.ipus:
        live, points = base_bytes[ipu], [(0.0, base_bytes[ipu])]
        for t, delta in sorted(changes[ipu]):
            live += delta
            points.append((t, live))
        counters[ipu] = points
    return counters
