"""A pipelined replica's stages, from the compiled programs the stages run.

Each stage's forward and backward programs (``StageProgram.forward`` and its backward) are
lowered and compiled from shapes only, as offline mode needs; XLA's ``cost_analysis()`` of
those compiled objects gives the stage's counts, its jaxprs its operations, largest
temporary and matmuls, and its vjp residuals its activations. The bytes each stage holds
come from the step's shapes: its weights (a tied weight with the first stage that stores it
on its IPU), its share of the optimiser state, and its gradient and accumulator
(``programs.gradient_nbytes``, the one definition the data-parallel profile uses too).
The hardware model prices and schedules the stages (``hardware.simulate_step``).

References:
    JAX documentation, "Ahead-of-time lowering and compilation" (``jit(f).lower(...)
    .compile().cost_analysis()``); Graphcore, "Memory and Performance Optimisation on the
    IPU", section 5.3.2 (recomputation checkpoints).
"""

from __future__ import annotations

import functools
from typing import Any

import jax

import hardware
from popdist_emu._trees import tree_nbytes
from popdist_emu.pipeline import Pipeline, stage_vjp
from popdist_emu.programs import (
    ANALYSIS_ONLY_OPTIONS,
    StepShapes,
    XlaCost,
    gradient_nbytes,
    jaxpr_size,
    matmul_ops,
    residual_bytes,
    xla_cost,
)


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


def _counts(cost: XlaCost, num_ops: int, matmuls: tuple[Any, ...]) -> hardware.PassCounts:
    return hardware.PassCounts(
        cost.flops, cost.bytes_accessed, cost.transcendentals, num_ops, matmuls
    )


def stage_weights(pipeline: Pipeline, shapes: StepShapes) -> tuple[hardware.StageProfile, ...]:
    """Each stage's weights, optimiser state and gradient from the step's shapes alone:
    what a stage holds before anything is compiled (the optimiser state split as the
    weights are)."""
    total_state = tree_nbytes(shapes.opt_state)
    total_params = max(tree_nbytes(shapes.params), 1)
    stages = []
    for s in range(pipeline.num_stages):
        held = pipeline.held_params(shapes.params, s)
        nbytes = tree_nbytes(held)
        stages.append(
            hardware.StageProfile(
                ipu=pipeline.ipus[s],
                blocks=tuple(pipeline.stages[s].blocks),
                parameter_bytes=nbytes,
                optimiser_state_bytes=round(total_state * nbytes / total_params),
                gradient_bytes=gradient_nbytes(held),
            )
        )
    return tuple(stages)


def profile_stages(
    pipeline: Pipeline,
    shapes: StepShapes,
    *,
    partials_type: str = "float",
    analysis_only: bool = False,
) -> tuple[hardware.StageProfile, ...]:
    """Compiles every stage's forward and backward on shapes and profiles them; reads their
    matmuls and convolutions for the convolution planner (``partials_type`` is PopLibs').

    A functional run compiles the programs its stages then run (JAX's compilation cache
    hands the same executables to the calls); offline (``analysis_only``) they are compiled
    for analysis only, as ``compile_program`` does.
    """
    options = ANALYSIS_ONLY_OPTIONS if analysis_only else None
    out = []
    x = shapes.micro_batch
    params = shapes.params
    for s, (prog, weights) in enumerate(
        zip(pipeline.programs, stage_weights(pipeline, shapes), strict=True)
    ):
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
        block_params = [
            {k: p[k] for k in pipeline.model.block(name).params}
            for name in pipeline.stages[s].blocks
        ]
        out.append(
            weights._replace(
                forward=_counts(
                    xla_cost(fwd), fwd_size.num_ops, ops(fwd_jaxpr, prefix=f"{where}forward ")
                ),
                backward=_counts(xla_cost(bwd), bwd_size.num_ops, ops(bwd_jaxpr, prefix=where)),
                # The compiled backward (a vjp) runs the forward again.
                backward_reruns_forward=True,
                input_bytes=tree_nbytes(x),
                output_bytes=0 if prog.last else tree_nbytes(y),
                activation_bytes=_stage_residual_bytes(prog.fn, p, x),
                temporary_bytes=2 * bwd_size.largest_bytes,
                checkpoint_bytes=_checkpoint_bytes(pipeline, s, p, x),
                block_gradient_bytes=max(gradient_nbytes(b) for b in block_params),
            )
        )
        x = y
    return tuple(out)


def summed_counts(stages: tuple[hardware.StageProfile, ...]) -> XlaCost:
    """The replica's forward and backward counts: its stages' summed."""
    return XlaCost(
        flops=sum(s.forward.flops + s.backward.flops for s in stages),
        bytes_accessed=sum(s.forward.bytes_accessed + s.backward.bytes_accessed for s in stages),
        transcendentals=sum(s.forward.transcendentals + s.backward.transcendentals for s in stages),
    )
