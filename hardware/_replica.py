"""One replica's step as the hardware model sees it: a tuple of stages, whatever the system.

Every replica is a pipeline. A data-parallel replica, whose whole micro-step is one compiled
program, is a pipeline of one stage on IPU 0 (its pass is the micro-step); a replica split by
PopTorch's ``PipelinedExecution`` or ``ShardedExecution`` has one stage per block group, on
the IPUs the program names. A stage says what its compiled programs ask of its IPU, in
counts (XLA's FLOPs, bytes, transcendentals, operations and its matmuls and convolutions)
and bytes (weights, optimiser state, gradient, activations, ...): nothing depends on the
system, so one :class:`ReplicaModel` is simulated on any IPU-POD
(``hardware.simulate_step``), and the stage's seconds follow from its counts there
(:func:`stage_costs`).

References:
    Graphcore, "Memory and Performance Optimisation on the IPU", sections 4.2 (pipelining)
    and 5.3 (recomputation); PopTorch User Guide, "Parallel execution" (PipelinedExecution,
    ShardedExecution; a model without them runs on one IPU).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hardware._compute import compute_seconds, matmul_flops
from hardware._parameters import ModelParameters
from hardware._pipeline import STRATEGIES, StageCost, check_strategy, min_gradient_accumulation
from hardware._planner import ConvOp
from hardware._planner_step import plan_profile
from hardware._specs import IpuSpec
from hardware._stage import PassCounts, StageProfile
from hardware._step_profile import StepProfile


def micro_step_stage(profile: StepProfile) -> StageProfile:
    """A data-parallel replica's one stage: its compiled micro-step on IPU 0, with every
    weight, the whole optimiser state, gradient and activations of the profile."""
    return StageProfile(
        ipu=0,
        backward=PassCounts(
            profile.grad_flops,
            profile.grad_bytes_accessed,
            profile.grad_transcendentals,
            profile.num_ops,
            tuple(profile.matmuls),
            code_ops=profile.code_ops,
        ),
        activation_bytes=profile.activation_bytes,
        parameter_bytes=profile.parameter_bytes,
        optimiser_state_bytes=profile.optimiser_state_bytes,
        gradient_bytes=profile.gradient_bytes,
        temporary_bytes=profile.temporary_bytes,
    )


@dataclasses.dataclass(frozen=True)
class ReplicaModel:
    """One replica's step: the replica-wide profile and the stages its IPUs run.

    Attributes:
        profile: the replica-wide step (host bytes, collectives, update, accumulation,
            settings); its counts are the stages' summed.
        stages: the stages, in pipeline order; one for a data-parallel replica.
        strategy: ``pipelined`` or ``sharded`` (PopTorch's execution strategies); None for
            a replica with no execution strategy, whose one stage is its micro-step.
        schedule: ``grouped`` or ``interleaved`` (the stash depths of a pipeline).
    """

    profile: StepProfile
    stages: tuple[StageProfile, ...]
    strategy: str | None = None
    schedule: str = "grouped"

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        if not self.stages:
            raise ValueError("a replica has at least one stage.")
        if self.strategy is None:
            if len(self.stages) != 1 or self.stages[0].ipu != 0:
                raise ValueError(
                    f"a replica without an execution strategy runs one program on IPU 0, got "
                    f"{len(self.stages)} stages on IPUs {[s.ipu for s in self.stages]}: pass "
                    f"strategy= one of {STRATEGIES}."
                )
            check_strategy("sharded", self.schedule)
        else:
            check_strategy(self.strategy, self.schedule)

    @classmethod
    def data_parallel(cls, profile: StepProfile) -> ReplicaModel:
        """The replica whose step is one compiled micro-step (no execution strategy)."""
        return cls(profile, (micro_step_stage(profile),))

    @property
    def recomputation(self) -> bool:
        """Whether the stages stash only their inputs and recompute (the profile's)."""
        return self.profile.recomputation

    @property
    def ipus(self) -> tuple[int, ...]:
        """The IPUs the stages run on, each once, in increasing order."""
        return tuple(sorted({s.ipu for s in self.stages}))

    def replace(self, **changes: object) -> ReplicaModel:
        """A copy with ``changes`` to its fields; ``profile=`` a new replica profile."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def check(self, ipus_per_replica: int) -> None:
        """Refuses stages a replica of ``ipus_per_replica`` IPUs cannot run, and a pipelined
        step with too little gradient accumulation (PopTorch's rule).

        A data-parallel replica runs on IPU 0 whatever its IPUs (the others idle, as a
        PopTorch model without placement runs on its first IPU); an execution strategy
        places a stage on every IPU of the replica.

        Raises:
            ValueError: the stages and the replica's IPUs disagree, or the accumulation is
                below ``hardware.min_gradient_accumulation``.
        """
        used = list(self.ipus)
        wanted = [0] if self.strategy is None else list(range(ipus_per_replica))
        if used != wanted or used[-1] >= ipus_per_replica:
            raise ValueError(
                f"{len(self.stages)} stages on IPUs {used} for {ipus_per_replica} IPUs per "
                f"replica: place at least one stage on each IPU 0..{ipus_per_replica - 1} "
                "of the replica, and none beyond."
            )
        if self.strategy is None:
            return
        need = min_gradient_accumulation(len(self.stages), self.strategy)
        ga = self.profile.gradient_accumulation
        if ga < need:
            raise ValueError(
                f"gradient_accumulation={ga} is too small for a pipelined training step over "
                f"{len(self.stages)} stages: PopTorch needs it >= the {need} pipeline stages "
                f"of training (2 x {len(self.stages)} - 1; use --gradient-accumulation {need} "
                "or more)."
            )


def as_replica(replica: ReplicaModel | StepProfile) -> ReplicaModel:
    """``replica``, or a data-parallel replica of a step profile."""
    if isinstance(replica, ReplicaModel):
        return replica
    return ReplicaModel.data_parallel(replica)


def _pass_seconds(
    counts: PassCounts,
    ipu: IpuSpec,
    precision: str,
    params: ModelParameters,
    matmul: float | None = None,
) -> float:
    """The pass's roofline time, its matmuls' FLOPs (``matmul``; default: those of its
    ``matmuls``) at the matmul efficiency."""
    return compute_seconds(
        counts.flops,
        counts.bytes_accessed,
        counts.transcendentals,
        ipu,
        precision,
        params,
        compute_sets=counts.num_ops,
        matmul_flops=matmul_flops(counts.matmuls) if matmul is None else matmul,
    )


def _minus(a: PassCounts, b: PassCounts) -> PassCounts:
    """``a`` without ``b``'s work (never below zero)."""
    return PassCounts(
        max(a.flops - b.flops, 0.0),
        max(a.bytes_accessed - b.bytes_accessed, 0.0),
        max(a.transcendentals - b.transcendentals, 0.0),
        max(a.num_ops - b.num_ops, 0),
        a.matmuls,
        code_ops=max(a.code - b.code, 0),
    )


def stage_costs(
    model: ReplicaModel, ipu: IpuSpec, params: ModelParameters
) -> tuple[StageCost, ...]:
    """Each stage's forward and backward seconds on ``ipu`` (roofline and compute-set cost,
    ``hardware.compute_seconds``, plus the convolution planner's chosen plans beyond the
    fastest, planned with the replica's ``availableMemoryProportion`` for the stage's IPU).

    A backward that reruns the forward is charged without it when the stash keeps the
    forward's activations (no recomputation), its planned cycles too.
    """
    profile = model.profile

    def planned(ops: Sequence[ConvOp], on_ipu: int) -> float:
        if not ops:
            return 0.0
        return plan_profile(profile, ipu, params, ipu_index=on_ipu, ops=tuple(ops)).extra_seconds

    costs = []
    for stage in model.stages:
        f, b = stage.forward, stage.backward
        forward = _pass_seconds(f, ipu, profile.precision, params)
        forward_plans = planned(f.matmuls, stage.ipu)
        forward += forward_plans
        rerun = stage.backward_reruns_forward and not model.recomputation
        if rerun:  # the backward's own matmuls: its count less the forward's it reruns
            own = max(matmul_flops(b.matmuls) - matmul_flops(f.matmuls), 0.0)
            backward = _pass_seconds(_minus(b, f), ipu, profile.precision, params, own)
        else:
            backward = _pass_seconds(b, ipu, profile.precision, params)
        plans = planned(b.matmuls, stage.ipu)
        backward += max(plans - forward_plans, 0.0) if rerun else plans
        costs.append(StageCost(stage, forward, backward))
    return tuple(costs)
