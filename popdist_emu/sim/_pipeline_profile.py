"""Per-stage profiles of a pipeline, from the compiled programs the stages run.

Each stage's forward and backward programs (``StageProgram.forward`` and its backward) are
lowered and compiled from shapes only, as offline mode needs, and XLA's ``cost_analysis()``
of those compiled objects gives the stage's FLOPs, bytes and transcendentals; the hardware
model then schedules the stages (``hardware.simulate_pipeline_step``). The replica-wide
profile is built by the one builder, ``popdist_emu.programs.build_step_profile``, from the
stages' summed counts, the trainer's compiled update, its step shapes and its collectives
(``Trainer.step_shapes``, ``Trainer.compile``), with the same settings as the
data-parallel profile.

References:
    JAX documentation, "Ahead-of-time lowering and compilation" (``jit(f).lower(...)
    .compile().cost_analysis()``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax

import hardware
from contract import REQUEST_VARIABLE
from popdist_emu._trees import tree_nbytes
from popdist_emu.pipeline import Pipeline, check_gradient_accumulation, stage_vjp
from popdist_emu.programs import (
    ANALYSIS_ONLY_OPTIONS,
    ProgramCounts,
    StepSettings,
    StepShapes,
    XlaCost,
    build_step_profile,
    jaxpr_size,
    matmul_ops,
    residual_bytes,
    xla_cost,
)
from popdist_emu.runtime import Trainer
from popdist_emu.sim._point import answer_request, trainer_relayout


def _stage_residual_bytes(fn: Any, p: Any, x: Any) -> int:
    """Bytes a stage's forward saves for its backward (vjp residuals, weights excluded)."""
    return residual_bytes(functools.partial(stage_vjp, fn), p, x)


def _checkpoint_bytes(pipeline: Pipeline, s: int, p: Any, x: Any) -> int:
    """Bytes live while stage ``s`` recomputes one micro-batch with a checkpoint at every
    block boundary: the inputs of its blocks after the first, plus the largest block's
    activations (MPO section 5.3.2, recomputation checkpoints)."""
    checkpoints, largest = 0, 0
    for i, name in enumerate(pipeline.stages[s].blocks):
        block = pipeline.model.block(name)
        bp = {k: p[k] for k in block.params}
        if i > 0:
            checkpoints += tree_nbytes(x)
        largest = max(largest, _stage_residual_bytes(block.fn, bp, x))
        x = jax.eval_shape(block.fn, bp, x)
    return checkpoints + largest


@dataclasses.dataclass(frozen=True)
class StageProfile:
    """XLA's counts for one stage's compiled forward and backward programs."""

    forward: XlaCost
    backward: XlaCost
    forward_ops: int
    backward_ops: int
    input_bytes: int
    output_bytes: int
    activation_bytes: int
    parameter_bytes: int
    temporary_bytes: int
    checkpoint_bytes: int
    block_parameter_bytes: int
    forward_matmuls: tuple[Any, ...] = ()
    backward_matmuls: tuple[Any, ...] = ()


def profile_stages(
    pipeline: Pipeline,
    params: Any,
    micro: Any,
    *,
    partials_type: str = "float",
    analysis_only: bool = False,
) -> list[StageProfile]:
    """Compiles every stage's forward and backward on shapes; reads their matmuls and
    convolutions for the convolution planner (``partials_type`` is PopLibs').

    A functional run compiles the programs its stages then run (JAX's compilation cache
    hands the same executables to the calls); offline (``analysis_only``) they are compiled
    for analysis only, as ``compile_program`` does.
    """
    options = ANALYSIS_ONLY_OPTIONS if analysis_only else None
    out = []
    x = micro
    for s, prog in enumerate(pipeline.programs):
        p = pipeline.stage_params(params, s)
        y = jax.eval_shape(prog.forward, p, x)
        prog.observe_output(y)
        fwd = prog.forward.lower(p, x).compile(compiler_options=options)
        backward = prog.backward_program(x)
        args = prog.backward_arguments(p, x, y)
        bwd = backward.lower(*args).compile(compiler_options=options)
        fwd_jaxpr = jax.make_jaxpr(prog.forward)(p, x).jaxpr
        bwd_jaxpr = jax.make_jaxpr(backward)(*args).jaxpr
        fwd_size, bwd_size = jaxpr_size(fwd_jaxpr), jaxpr_size(bwd_jaxpr)
        where = f"stage {s} "
        # The stage's parameters come first in both programs: one key per weight.
        ops = functools.partial(
            matmul_ops,
            partials_type=partials_type,
            weights=len(jax.tree.leaves(p)),
            weight_prefix=where,
        )
        out.append(
            StageProfile(
                forward=xla_cost(fwd),
                backward=xla_cost(bwd),
                forward_ops=fwd_size.num_ops,
                backward_ops=bwd_size.num_ops,
                input_bytes=tree_nbytes(x),
                output_bytes=0 if prog.last else tree_nbytes(y),
                activation_bytes=_stage_residual_bytes(prog.fn, p, x),
                parameter_bytes=tree_nbytes(pipeline.held_params(params, s)),
                temporary_bytes=2 * bwd_size.largest_bytes,
                checkpoint_bytes=_checkpoint_bytes(pipeline, s, p, x),
                block_parameter_bytes=max(
                    tree_nbytes({k: p[k] for k in pipeline.model.block(name).params})
                    for name in pipeline.stages[s].blocks
                ),
                forward_matmuls=ops(fwd_jaxpr, prefix=f"{where}forward "),
                backward_matmuls=ops(bwd_jaxpr, prefix=where),
            )
        )
        x = y
    return out


def stage_costs(
    pipeline: Pipeline,
    profiles: list[StageProfile],
    replica: hardware.StepProfile,
    system: hardware.SystemSpec,
    params: hardware.ModelParameters,
) -> tuple[hardware.StageCost, ...]:
    """The hardware model's per-stage costs of the profiled stages (a tied weight's bytes
    are charged to the first stage that stores it on its IPU).

    The compiled backward re-runs the forward; without recomputation the stash keeps the
    forward's activations, so the backward's time is charged without that forward. The
    convolution planner plans each stage's matmuls and convolutions with the replica's
    ``availableMemoryProportion`` for the stage's IPU: the cycles its plans add go to the
    stage's passes (the forward's to the forward), their memory to the stage's IPU.
    """
    ipu, precision = system.ipu, replica.precision

    def planner_seconds(ops: tuple[Any, ...], on_ipu: int) -> float:
        if not ops:
            return 0.0
        return hardware.plan_profile(replica, ipu, params, ipu_index=on_ipu, ops=ops).extra_seconds

    total_params = max(sum(p.parameter_bytes for p in profiles), 1)
    costs = []
    for s, sp in enumerate(profiles):
        f, b = sp.forward, sp.backward
        fwd = hardware.stage_seconds(
            f.flops, f.bytes_accessed, f.transcendentals, sp.forward_ops, ipu, precision, params
        )
        keep = 1.0 if pipeline.recomputation else 0.0
        bwd = hardware.stage_seconds(
            max(b.flops - (1 - keep) * f.flops, 0.0),
            max(b.bytes_accessed - (1 - keep) * f.bytes_accessed, 0.0),
            max(b.transcendentals - (1 - keep) * f.transcendentals, 0.0),
            max(sp.backward_ops - int((1 - keep) * sp.forward_ops), 0),
            ipu,
            precision,
            params,
        )
        on_ipu = pipeline.ipus[s]
        fwd_plans = planner_seconds(sp.forward_matmuls, on_ipu)
        fwd += fwd_plans
        bwd += max(planner_seconds(sp.backward_matmuls, on_ipu) - (1 - keep) * fwd_plans, 0.0)
        share = sp.parameter_bytes / total_params
        costs.append(
            hardware.StageCost(
                ipu=pipeline.ipus[s],
                blocks=tuple(pipeline.stages[s].blocks),
                forward_seconds=fwd,
                backward_seconds=bwd,
                output_bytes=sp.output_bytes,
                input_bytes=sp.input_bytes,
                activation_bytes=sp.activation_bytes,
                parameter_bytes=sp.parameter_bytes,
                optimiser_state_bytes=round(replica.optimiser_state_bytes * share),
                gradient_bytes=sp.parameter_bytes,
                temporary_bytes=sp.temporary_bytes,
                num_ops=sp.forward_ops + sp.backward_ops,
                checkpoint_bytes=sp.checkpoint_bytes,
                block_gradient_bytes=sp.block_parameter_bytes,
                matmuls=sp.backward_matmuls,  # the backward program runs the forward too
            )
        )
    return tuple(costs)


def _settings(trainer: Trainer, shapes: StepShapes, batch: Any, name: str) -> StepSettings:
    """The pipelined replica's run settings: the trainer's Options, its stage's collectives
    and RTS domain, and the pipeline's recomputation (as the data-parallel profile's)."""
    pipeline = _pipeline_of(trainer)
    return StepSettings.from_options(
        trainer.options,
        micro_batch_size=shapes.micro_batch_size,
        collectives=trainer.compile(batch).collectives,
        sharding_domain=trainer.sharding_domain,
        recomputation=pipeline.recomputation,
        name=name,
    )


def replica_profile(
    trainer: Trainer, batch: Any, profiles: list[StageProfile], name: str
) -> hardware.StepProfile:
    """The replica-wide step profile: the stages' sums, the trainer's update and collectives."""
    step = trainer.compile(batch)
    shapes = trainer.step_shapes(batch)
    counts = ProgramCounts(
        grad=XlaCost(
            flops=sum(p.forward.flops + p.backward.flops for p in profiles),
            bytes_accessed=sum(
                p.forward.bytes_accessed + p.backward.bytes_accessed for p in profiles
            ),
            transcendentals=sum(
                p.forward.transcendentals + p.backward.transcendentals for p in profiles
            ),
        ),
        update=xla_cost(step.update.compiled),
        num_ops=sum(p.forward_ops + p.backward_ops for p in profiles),
        activation_bytes=sum(p.activation_bytes for p in profiles),
        temporary_bytes=max(p.temporary_bytes for p in profiles),
    )
    return build_step_profile(
        counts,
        _settings(trainer, shapes, batch, name),
        params=shapes.params,
        opt_state=shapes.opt_state,
        micro_batch=shapes.micro_batch,
        gradient_bytes=shapes.gradient_bytes,
    )


def _pipeline_of(trainer: Trainer) -> Pipeline:
    if trainer.pipeline is None:
        raise ValueError(
            "simulate_pipeline: the trainer has no execution strategy; use "
            "popdist_emu.simulate(trainer, batch), which profiles its one micro-step."
        )
    return trainer.pipeline


def simulate_pipeline(
    trainer: Trainer,
    batch: Any,
    *,
    system: str,
    environ: Mapping[str, str],
    name: str = "model",
    host: Mapping[str, Any] | None = None,
) -> hardware.StepSimulation:
    """``popdist_emu.simulate`` for a trainer with an execution strategy.

    Args:
        trainer: the trainer, whose ``pipeline`` is not None.
        batch: a call's batch or its shapes.
        system: the ``--system`` name ("" for the smallest Mk2 POD that holds the job).
        environ: the environment ``simulate`` read, for ``poprun-emu-scaling``'s request.
        name: the model's name in reports.
        host: measured host figures (``hardware.StepProfile`` fields) for the replica.

    Raises:
        hardware.OutOfMemoryError: an IPU of the replica does not fit its stage; the
            message names the IPU, the stage and the remedies.
    """
    pipeline = _pipeline_of(trainer)
    layout = trainer.options.layout
    spec = hardware.select_system(system, layout.num_ipus)
    params = hardware.load_parameters(model=name)
    shapes = trainer.step_shapes(batch)
    if not environ.get(REQUEST_VARIABLE):
        # Under poprun-emu-scaling every point's own memory check decides (with RTS a
        # larger point may fit where this layout does not).
        settings = _settings(trainer, shapes, batch, name)
        _refuse_before_compiling(trainer, shapes, settings, spec, params)
    profiles = profile_stages(
        pipeline,
        shapes.params,
        shapes.micro_batch,
        partials_type=trainer.options.partials_type,
        analysis_only=trainer.offline,
    )
    replica = dataclasses.replace(replica_profile(trainer, batch, profiles, name), **(host or {}))
    stages = stage_costs(pipeline, profiles, replica, spec, params)
    strategy = pipeline.strategy.strategy
    depth = int(trainer.options.prefetch_depth)

    def simulator(
        profile: hardware.StepProfile,
        point_layout: hardware.ReplicaLayout,
        point_system: hardware.SystemSpec,
        **kwargs: Any,
    ) -> hardware.StepSimulation:
        # A point's own accumulation (strong scaling) obeys the rule the trainer enforced.
        check_gradient_accumulation(profile.gradient_accumulation, pipeline.num_stages, strategy)
        return hardware.simulate_pipeline_step(
            profile,
            stages,
            point_layout,
            point_system,
            strategy=strategy,
            schedule=pipeline.strategy.schedule,
            recomputation=pipeline.recomputation,
            parameters=params,
            **kwargs,
        )

    # poprun-emu-scaling: every point of a sweep from these stages (no-op otherwise).
    answer_request(
        replica,
        prefetch_depth=depth,
        environ=environ,
        relayout=trainer_relayout(trainer, batch),
        simulator=simulator,
    )
    return simulate_stages(
        replica,
        stages,
        layout,
        spec,
        strategy=strategy,
        schedule=pipeline.strategy.schedule,
        recomputation=pipeline.recomputation,
        parameters=params,
        prefetch_depth=depth,
    )


def _refuse_before_compiling(
    trainer: Trainer,
    shapes: StepShapes,
    settings: StepSettings,
    spec: hardware.SystemSpec,
    parameters: hardware.ModelParameters,
) -> None:
    """Out of memory from shapes alone, before any compile, when a stage's weights,
    gradients, accumulators and optimiser state already overflow its IPU (Poplar fails at
    compile time; a model far too large for its IPUs should not wait for XLA to say so).

    The bound is the replica's profile with nothing measured yet (the one builder, no
    counts, no bytes): only the stages' weights and state are charged.
    """
    pipeline = _pipeline_of(trainer)
    total_state = tree_nbytes(shapes.opt_state)
    total_params = max(tree_nbytes(shapes.params), 1)
    stages = []
    for s in range(pipeline.num_stages):
        nbytes = tree_nbytes(pipeline.held_params(shapes.params, s))
        stages.append(
            hardware.StageCost(
                ipu=pipeline.ipus[s],
                blocks=tuple(pipeline.stages[s].blocks),
                forward_seconds=0.0,
                backward_seconds=0.0,
                parameter_bytes=nbytes,
                optimiser_state_bytes=round(total_state * nbytes / total_params),
                gradient_bytes=nbytes,
            )
        )
    simulate_stages(
        build_step_profile(ProgramCounts(), settings),
        tuple(stages),
        trainer.options.layout,
        spec,
        strategy=pipeline.strategy.strategy,
        schedule=pipeline.strategy.schedule,
        recomputation=pipeline.recomputation,
        parameters=parameters,
        prefetch_depth=int(trainer.options.prefetch_depth),
    )


def simulate_stages(
    profile: hardware.StepProfile,
    stages: tuple[hardware.StageCost, ...],
    layout: hardware.ReplicaLayout,
    system: hardware.SystemSpec,
    **kwargs: Any,
) -> hardware.StepSimulation:
    """``hardware.simulate_pipeline_step`` followed by the per-IPU memory check."""
    sim = hardware.simulate_pipeline_step(profile, stages, layout, system, **kwargs)
    hardware.check_pipeline_memory(sim)
    return sim


def with_profile(
    sim: hardware.StepSimulation, profile: hardware.StepProfile
) -> hardware.StepSimulation:
    """The same pipelined step re-simulated with another replica profile (infeed bytes)."""
    report = sim.pipeline
    return simulate_stages(
        profile,
        report.schedule.stages,
        sim.layout,
        sim.system,
        strategy=report.strategy,
        schedule=report.schedule.schedule,
        recomputation=report.recomputation,
        parameters=sim.parameters,
        prefetch_depth=sim.prefetch_depth,
    )
