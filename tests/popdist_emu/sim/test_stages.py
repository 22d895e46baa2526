"""profile_stages (``sim/_stages.py``) reads each stage's counts from the programs the pipeline
runs (``Pipeline.compile``): XLA's cost analysis of their executables and their jaxprs,
counted as the stages always were (``jax.make_jaxpr`` of the jitted stage functions), so the
hardware model's numbers do not change; a pipeline without those programs is refused.

Compilations are counted with JAX's monitoring events (the ``compiles`` fixture, conftest.py).
"""

import jax
import numpy as np
import optax
import pytest
from two_dense_blocks import two_dense_blocks

import hardware
import popdist_emu
from popdist_emu.pipeline import float_mask, split_floats
from popdist_emu.programs import StepShapes, jaxpr_size, xla_cost
from popdist_emu.sim._stages import profile_stages

ACCUMULATION = 3
PARAMS = {f"w{i}": np.full((6, 6), 0.1, np.float32) for i in range(2)}


def batch():
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((1, ACCUMULATION, 1, 4, 6)).astype(np.float32),
        rng.standard_normal((1, ACCUMULATION, 1, 4)).astype(np.float32),
    )


def trainer():
    options = popdist_emu.Options(
        layout=hardware.ReplicaLayout(1, ipus_per_replica=2),
        system="pod16",
        gradient_accumulation=ACCUMULATION,
        execution_strategy=popdist_emu.PipelinedExecution("B0", "B1"),
    )
    return popdist_emu.Trainer(two_dense_blocks(), optax.sgd(0.1), PARAMS, options)


def test_the_stage_counts_come_from_the_programs_the_steps_run(compiles):
    t, b = trainer(), batch()
    t.step(b)
    shapes = t.step_shapes(b)
    compiles.clear()
    stages = profile_stages(t.pipeline, shapes)
    assert compiles == [], compiles  # profiled from the programs the step compiled
    programs = t.pipeline.compile(shapes.params, shapes.micro_batch)
    for stage, program, functions in zip(stages, programs, t.pipeline.functions, strict=True):
        assert stage.forward[:3] == xla_cost(program.forward.compiled)
        assert stage.backward[:3] == xla_cost(program.backward.compiled)
        # The operation counts and the largest temporary as jax.make_jaxpr of the jitted
        # stage functions gave them before the programs were the pipeline's.
        y = program.output
        dy = None if functions.last else split_floats(y, float_mask(y))[0]
        fwd = jaxpr_size(jax.make_jaxpr(functions.forward)(program.params, program.input).jaxpr)
        bwd = jaxpr_size(
            jax.make_jaxpr(functions.backward)(program.params, program.input, dy).jaxpr
        )
        assert (stage.forward.num_ops, stage.backward.num_ops) == (fwd.num_ops, bwd.num_ops)
        assert stage.temporary_bytes == 2 * bwd.largest_bytes


def test_a_pipeline_without_the_runtimes_programs_is_refused_in_one_line():
    """A hand-built pipeline compiles bare executables, which have no jaxpr to read."""
    pipeline = popdist_emu.Pipeline(
        two_dense_blocks(), popdist_emu.PipelinedExecution("B0", "B1"), PARAMS,
        ipus_per_replica=2, gradient_accumulation=ACCUMULATION,
    )  # fmt: skip
    micro = (jax.ShapeDtypeStruct((4, 6), np.float32), jax.ShapeDtypeStruct((4,), np.float32))
    loss = jax.ShapeDtypeStruct((), np.float32)
    shapes = StepShapes(trainer().step_shapes(batch()).params, (), micro, loss)
    with pytest.raises(TypeError, match="compile=compile_program") as err:
        profile_stages(pipeline, shapes)
    assert "\n" not in str(err.value)
