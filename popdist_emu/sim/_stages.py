"""A pipelined replica's stages, from the compiled programs the stages run.

Each stage's forward and backward programs are the pipeline's own (``Pipeline.compile``):
compiled once per step shape through the ``compile_program`` the trainer handed its
pipeline, from shapes alone as offline mode needs, kept in the process's one program cache
and run by the steps. XLA's ``cost_analysis()`` of those executables gives the stage's
counts, their jaxprs its operations, largest temporary and matmuls, and its vjp residuals
its activations. The bytes each stage holds come from the step's shapes: its weights (a
tied weight with the first stage that stores it on its IPU), its share of the optimiser
state, and its gradient and accumulator (``programs.gradient_nbytes``, the one definition
the data-parallel profile uses too). The hardware model prices and schedules the stages
(``hardware.simulate_step``).

References:
    JAX documentation, "Ahead-of-time lowering and compilation" (``jit(f).lower(...)
    .compile().cost_analysis()``); Graphcore, "Memory and Performance Optimisation on the
    IPU", section 5.3.2 (recomputation checkpoints).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax

import hardware
from popdist_emu._trees import tree_nbytes
from popdist_emu.pipeline import Pipeline, stage_vjp
from popdist_emu.programs import (
    JaxprSize,
    Program,
    StepShapes,
    XlaCost,
    checkpoint_segments,
    gradient_nbytes,
    jaxpr_size,
    matmul_ops,
    names_checkpoints,
    residual_bytes,
    unnamed,
    xla_cost,
)


def _stage_residual_bytes(fn: Callable[..., object], p: Any, x: Any, named: bool = False) -> int:
    """Bytes a stage's forward saves for its backward (vjp residuals, weights excluded),
    each value once: where the program ``named`` checkpoints, a named value is not counted
    twice."""
    forward = unnamed(fn, p, x) if named else fn
    return residual_bytes(functools.partial(stage_vjp, forward), p, x)


def _checkpoint_bytes(
    pipeline: Pipeline, s: int, p: Any, x: Any, named: bool = False
) -> tuple[int, int]:
    """Bytes live while stage ``s`` recomputes one micro-batch with a checkpoint at every
    block boundary: the inputs of its blocks after the first, plus the largest block's
    activations (MPO section 5.3.2, recomputation checkpoints); where a block names
    checkpoints of its own (``checkpoint_name``), its largest segment between them instead
    of the whole block's. Also the bytes of those named values, which the stage stashes
    beside its input (``programs.checkpoint_segments``)."""
    checkpoints, largest, stashed = 0, 0, 0
    for i, name in enumerate(pipeline.stages[s].blocks):
        block = pipeline.model.block(name)
        bp = {k: p[k] for k in block.params}
        if i > 0:
            checkpoints += tree_nbytes(x)
        cut = checkpoint_segments(block.fn, bp, x) if named else None
        if cut is not None and cut.segments > 1:
            largest, stashed = max(largest, cut.largest_bytes), stashed + cut.kept_bytes
        else:
            largest = max(largest, _stage_residual_bytes(block.fn, bp, x))
        x = jax.eval_shape(block.fn, bp, x)
    return checkpoints + largest, stashed


def _counts(
    cost: XlaCost, size: JaxprSize, matmuls: tuple[hardware.ConvOp, ...]
) -> hardware.PassCounts:
    return hardware.PassCounts(
        cost.flops,
        cost.bytes_accessed,
        cost.transcendentals,
        size.num_ops,
        matmuls,
        code_ops=size.code_ops,
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


def _program(program: object, stage: int, direction: str) -> Program:
    """The stage's compiled program, as ``compile_program`` returned it: a pipeline built
    without the runtime's ``compile`` holds bare executables, without the jaxpr to read.

    Raises:
        TypeError: such a pipeline (build it with ``compile=compile_program``).
    """
    if not isinstance(program, Program):
        raise TypeError(
            f"profile_stages: stage {stage}'s {direction} is a {type(program).__name__}, not "
            f"a popdist_emu.Program; build the Pipeline with compile=compile_program (the "
            f"Trainer does) to profile the programs it runs."
        )
    return program


def _size_as_called(program: Program) -> JaxprSize:
    """:func:`jaxpr_size` of the program as its own call: its jaxpr's operations plus the
    call, whose results are its outputs. The stage counts have always been read from
    ``jax.make_jaxpr`` of the jitted stage function, which wraps the program in one such
    call equation; counted the same way here, the stages' counts stay what they were."""
    inner = jaxpr_size(program.jaxpr.jaxpr)
    outputs = [math.prod(a.shape) * a.dtype.itemsize for a in program.jaxpr.out_avals]
    return JaxprSize(inner.num_ops + 1, max([inner.largest_bytes, *outputs]), inner.code_ops + 1)


def profile_stages(
    pipeline: Pipeline, shapes: StepShapes, *, partials_type: str = "float"
) -> tuple[hardware.StageProfile, ...]:
    """Profiles every stage's forward and backward programs, the ones the pipeline runs
    (``Pipeline.compile``: compiled once through the pipeline's ``compile``, for analysis
    only where the trainer is offline), from their XLA cost analyses and jaxprs; reads their
    matmuls and convolutions for the convolution planner (``partials_type`` is PopLibs').

    Raises:
        TypeError: a pipeline whose programs are not ``popdist_emu.Program`` s.
    """
    out = []
    programs = pipeline.compile(shapes.params, shapes.micro_batch)
    for s, (stage, functions, weights) in enumerate(
        zip(programs, pipeline.functions, stage_weights(pipeline, shapes), strict=True)
    ):
        fwd = _program(stage.forward, s, "forward")
        bwd = _program(stage.backward, s, "backward")
        p, x, y = stage.params, stage.input, stage.output
        fwd_size, bwd_size = _size_as_called(fwd), _size_as_called(bwd)
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
        named = names_checkpoints(fwd.jaxpr.jaxpr)
        working, stashed = _checkpoint_bytes(pipeline, s, p, x, named)
        out.append(
            weights._replace(
                forward=_counts(
                    xla_cost(fwd.compiled),
                    fwd_size,
                    ops(fwd.jaxpr, prefix=f"{where}forward "),
                ),
                backward=_counts(xla_cost(bwd.compiled), bwd_size, ops(bwd.jaxpr, prefix=where)),
                # The compiled backward (a vjp) runs the forward again.
                backward_reruns_forward=True,
                input_bytes=tree_nbytes(x),
                output_bytes=0 if functions.last else tree_nbytes(y),
                activation_bytes=_stage_residual_bytes(functions.fn, p, x, named),
                temporary_bytes=2 * bwd_size.largest_bytes,
                checkpoint_bytes=working,
                stashed_checkpoint_bytes=stashed,
                block_gradient_bytes=max(gradient_nbytes(b) for b in block_params),
            )
        )
    return tuple(out)


def summed_counts(stages: tuple[hardware.StageProfile, ...]) -> XlaCost:
    """The replica's forward and backward counts: its stages' summed."""
    return XlaCost(
        flops=sum(s.forward.flops + s.backward.flops for s in stages),
        bytes_accessed=sum(s.forward.bytes_accessed + s.backward.bytes_accessed for s in stages),
        transcendentals=sum(s.forward.transcendentals + s.backward.transcendentals for s in stages),
    )
