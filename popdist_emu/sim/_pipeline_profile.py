"""Per-stage profiles of a pipeline, from the compiled programs the stages run.

Each stage's forward and backward programs (``StageProgram.forward`` and its backward) are
lowered and compiled from shapes only, as offline mode needs, and XLA's ``cost_analysis()``
of those compiled objects gives the stage's FLOPs, bytes and transcendentals; the hardware
model then schedules the stages (``hardware.simulate_pipeline_step``). The replica-wide
parts (host bytes, collectives, the update) are profiled from the trainer's own compiled
update and collectives.

References:
    JAX documentation, "Ahead-of-time lowering and compilation" (``jit(f).lower(...)
    .compile().cost_analysis()``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np

import hardware
from popdist_emu._environment import ENV_SCALING_REQUEST, InstanceEnvironment
from popdist_emu._trees import tree_nbytes
from popdist_emu.pipeline import check_gradient_accumulation
from popdist_emu.pipeline._model import Pipeline, _float_mask, _split
from popdist_emu.programs import matmul_ops
from popdist_emu.programs._profile import ANALYSIS_ONLY_OPTIONS, _cost, _precision, _walk
from popdist_emu.sim._point import answer_request, trainer_relayout


def _residual_bytes(fn, p, x) -> int:
    """Bytes the stage's forward saves for its backward (vjp residuals, weights excluded)."""
    mask = _float_mask(x)

    def residuals(p, x):
        xf, xo = _split(x, mask)
        treedef = jax.tree.structure(x)

        def f(p, xf):
            fi, oi = iter(xf), iter(xo)
            leaves = [next(fi) if m else next(oi) for m in mask]
            out = fn(p, jax.tree.unflatten(treedef, leaves))
            return [o for o in jax.tree.leaves(out) if jnp.issubdtype(o.dtype, jnp.floating)]

        return jax.vjp(f, p, xf)[1]

    closed = jax.make_jaxpr(residuals)(p, x)
    inputs = set(closed.jaxpr.invars)
    seen, total = set(), 0
    for var in closed.jaxpr.outvars:
        if not isinstance(var, jex.core.Var) or var in inputs or var in seen:
            continue
        seen.add(var)
        total += math.prod(var.aval.shape) * np.dtype(var.aval.dtype).itemsize
    return int(total)


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
        largest = max(largest, _residual_bytes(block.fn, bp, x))
        x = jax.eval_shape(block.fn, bp, x)
    return checkpoints + largest


@dataclasses.dataclass(frozen=True)
class StageProfile:
    """XLA's counts for one stage's compiled forward and backward programs."""

    forward: dict[str, float]
    backward: dict[str, float]
    forward_ops: int
    backward_ops: int
    input_bytes: int
    output_bytes: int
    activation_bytes: int
    parameter_bytes: int
    temporary_bytes: int
    checkpoint_bytes: int
    block_parameter_bytes: int
    forward_matmuls: tuple = ()
    backward_matmuls: tuple = ()


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
        if prog._backward is None:
            prog._build(x)
        xf, xo = _split(x, prog._x_mask)
        dy = None if prog.last else _split(y, prog._y_mask)[0]
        bwd = prog._backward.lower(p, xf, xo, dy).compile(compiler_options=options)
        fwd_jaxpr = jax.make_jaxpr(prog.forward)(p, x).jaxpr
        bwd_jaxpr = jax.make_jaxpr(prog._backward)(p, xf, xo, dy).jaxpr
        fwd_ops, _ = _walk(fwd_jaxpr)
        bwd_ops, largest = _walk(bwd_jaxpr)
        where = f"stage {s} "
        out.append(
            StageProfile(
                forward=_cost(fwd),
                backward=_cost(bwd),
                forward_ops=fwd_ops,
                backward_ops=bwd_ops,
                input_bytes=tree_nbytes(x),
                output_bytes=0 if prog.last else tree_nbytes(y),
                activation_bytes=_residual_bytes(prog.fn, p, x),
                parameter_bytes=tree_nbytes(p),
                temporary_bytes=2 * largest,
                checkpoint_bytes=_checkpoint_bytes(pipeline, s, p, x),
                block_parameter_bytes=max(
                    tree_nbytes({k: p[k] for k in pipeline.model.block(name).params})
                    for name in pipeline.stages[s].blocks
                ),
                forward_matmuls=matmul_ops(
                    fwd_jaxpr, prefix=f"{where}forward ", partials_type=partials_type
                ),
                backward_matmuls=matmul_ops(bwd_jaxpr, prefix=where, partials_type=partials_type),
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
    """The hardware model's per-IPU costs of the profiled stages.

    The compiled backward re-runs the forward; without recomputation the stash keeps the
    forward's activations, so the backward's time is charged without that forward. The
    convolution planner plans each stage's matmuls and convolutions with the replica's
    ``availableMemoryProportion`` for the stage's IPU: the cycles its plans add go to the
    stage's passes (the forward's to the forward), their memory to the stage's IPU.
    """
    ipu, precision = system.ipu, replica.precision

    def planner_seconds(ops, on_ipu: int) -> float:
        if not ops:
            return 0.0
        return hardware.plan_profile(replica, ipu, params, ipu_index=on_ipu, ops=ops).extra_seconds

    total_params = max(sum(p.parameter_bytes for p in profiles), 1)
    costs = []
    for s, sp in enumerate(profiles):
        f, b = sp.forward, sp.backward
        fwd = hardware.stage_seconds(
            f["flops"], f["bytes accessed"], f["transcendentals"], sp.forward_ops, ipu,
            precision, params,
        )  # fmt: skip
        keep = 1.0 if pipeline.recomputation else 0.0
        bwd = hardware.stage_seconds(
            max(b["flops"] - (1 - keep) * f["flops"], 0.0),
            max(b["bytes accessed"] - (1 - keep) * f["bytes accessed"], 0.0),
            max(b["transcendentals"] - (1 - keep) * f["transcendentals"], 0.0),
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


def replica_shapes(trainer: Any, batch: Any) -> dict[str, Any]:
    """What the replica-wide profile needs from the trainer: shapes, its compiled update and
    the collectives its reduce-and-update stage records (no micro-step is compiled for a
    pipeline: the stages' programs are what runs)."""
    step = trainer.compile(batch)
    micro = trainer._micro_batch_shape
    return {
        "params": trainer._params_shape,
        "batch": (micro,),
        "opt_state": trainer._opt_state_shape,
        "micro_batch_size": int(np.shape(jax.tree.leaves(micro)[0])[0]),
        "collectives": step.collectives,
        "update": step.update,
    }


def replica_profile(trainer: Any, batch: Any, profiles: list[StageProfile], name: str):
    """The replica-wide step profile: the stages' sums, the trainer's update and collectives."""
    opts = trainer.options
    kwargs = replica_shapes(trainer, batch)
    params, micro = kwargs["params"], kwargs["batch"][0]
    opt_state = kwargs["opt_state"]
    update = _cost(kwargs["update"].compiled)
    info = getattr(trainer, "lever_info", None)
    domain = int(info.sharding_domain_size) if opts.replicated_tensor_sharding and info else 0
    return hardware.StepProfile(
        grad_flops=sum(p.forward["flops"] + p.backward["flops"] for p in profiles),
        grad_bytes_accessed=sum(
            p.forward["bytes accessed"] + p.backward["bytes accessed"] for p in profiles
        ),
        grad_transcendentals=sum(
            p.forward["transcendentals"] + p.backward["transcendentals"] for p in profiles
        ),
        update_flops=update["flops"],
        update_bytes_accessed=update["bytes accessed"],
        parameter_bytes=tree_nbytes(params),
        optimiser_state_bytes=tree_nbytes(opt_state),
        gradient_bytes=tree_nbytes(params),
        activation_bytes=sum(p.activation_bytes for p in profiles),
        temporary_bytes=max(p.temporary_bytes for p in profiles),
        host_bytes_per_micro_batch=tree_nbytes(micro),
        num_ops=sum(p.forward_ops + p.backward_ops for p in profiles),
        micro_batch_size=int(kwargs["micro_batch_size"]),
        gradient_accumulation=int(opts.gradient_accumulation),
        device_iterations=int(opts.device_iterations),
        precision=_precision(params),
        collectives=tuple(kwargs["collectives"]),
        replicated_tensor_sharding=bool(opts.replicated_tensor_sharding),
        offload_optimiser_state=bool(opts.offload_optimiser),
        sharding_domain=domain,
        recomputation=trainer.pipeline.recomputation,
        name=name,
        available_memory_proportion=opts.available_memory_proportion,
    )


def simulate_pipeline(
    trainer: Any,
    batch: Any,
    *,
    system: str | None = None,
    name: str = "model",
    environ: Mapping[str, str] | None = None,
) -> hardware.StepSimulation:
    """``popdist_emu.simulate`` for a trainer with an execution strategy.

    Raises:
        hardware.OutOfMemoryError: an IPU of the replica does not fit its stage; the
            message names the IPU, the stage and the remedies.
    """
    environ = os.environ if environ is None else environ
    pipeline: Pipeline = trainer.pipeline
    kwargs = replica_shapes(trainer, batch)
    layout = trainer.options.layout
    view = InstanceEnvironment.from_environ(environ)
    spec = hardware.select_system(view.system if system is None else system, layout.num_ipus)
    params = hardware.load_parameters()
    if not environ.get(ENV_SCALING_REQUEST):
        # Under poprun-emu-scaling every point's own memory check decides (with RTS a
        # larger point may fit where this layout does not).
        _refuse_before_compiling(trainer, kwargs, layout, spec, params, name)
    profiles = profile_stages(
        pipeline,
        kwargs["params"],
        kwargs["batch"][0],
        partials_type=trainer.options.partials_type,
        analysis_only=trainer.offline,
    )
    replica = replica_profile(trainer, batch, profiles, name)
    stages = stage_costs(pipeline, profiles, replica, spec, params)
    schedule = {
        "strategy": pipeline.strategy.strategy,
        "schedule": pipeline.strategy.schedule,
        "recomputation": pipeline.recomputation,
        "parameters": params,
    }
    depth = int(trainer.options.prefetch_depth)

    def simulator(profile, point_layout, system, **kwargs):
        # A point's own accumulation (strong scaling) obeys the rule the trainer enforced.
        check_gradient_accumulation(
            profile.gradient_accumulation, pipeline.num_stages, schedule["strategy"]
        )
        return hardware.simulate_pipeline_step(
            profile, stages, point_layout, system, **schedule, **kwargs
        )

    # poprun-emu-scaling: every point of a sweep from these stages (no-op otherwise).
    answer_request(
        replica,
        prefetch_depth=depth,
        environ=environ,
        relayout=trainer_relayout(trainer, batch),
        simulator=simulator,
    )
    return simulate_stages(replica, stages, layout, spec, **schedule, prefetch_depth=depth)


def _refuse_before_compiling(trainer, kwargs, layout, spec, params, name) -> None:
    """Out of memory from shapes alone, before any compile, when a stage's weights,
    gradients, accumulators and optimiser state already overflow its IPU (Poplar fails at
    compile time; a model far too large for its IPUs should not wait for XLA to say so)."""
    pipeline: Pipeline = trainer.pipeline
    opts = trainer.options
    total_state = tree_nbytes(kwargs["opt_state"])
    total_params = max(tree_nbytes(kwargs["params"]), 1)
    stages = []
    for s in range(pipeline.num_stages):
        nbytes = tree_nbytes(pipeline.stage_params(kwargs["params"], s))
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
    info = getattr(trainer, "lever_info", None)
    bound = hardware.StepProfile(
        grad_flops=0.0,
        grad_bytes_accessed=0.0,
        micro_batch_size=int(kwargs["micro_batch_size"]),
        gradient_accumulation=int(opts.gradient_accumulation),
        collectives=tuple(kwargs["collectives"]),
        replicated_tensor_sharding=bool(opts.replicated_tensor_sharding),
        offload_optimiser_state=bool(opts.offload_optimiser),
        sharding_domain=int(info.sharding_domain_size)
        if opts.replicated_tensor_sharding and info
        else 0,
        recomputation=pipeline.recomputation,
        name=name,
    )
    simulate_stages(
        bound,
        tuple(stages),
        layout,
        spec,
        strategy=pipeline.strategy.strategy,
        schedule=pipeline.strategy.schedule,
        recomputation=pipeline.recomputation,
        parameters=params,
        prefetch_depth=int(opts.prefetch_depth),
    )


def simulate_stages(profile, stages, layout, system, **kwargs) -> hardware.StepSimulation:
    """``hardware.simulate_pipeline_step`` followed by the per-IPU memory check."""
    sim = hardware.simulate_pipeline_step(profile, stages, layout, system, **kwargs)
    hardware.check_pipeline_memory(sim)
    return sim


def with_profile(sim: hardware.StepSimulation, profile: hardware.StepProfile):
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
