"""A pipeline's stage programs (``pipeline/_stage_programs.py``): compiled once per step shape
through the ``compile`` the runtime injects (``compile_program``), kept for reuse only in the
process's ``PROGRAM_CACHE`` (JAX's jit cache keeps none), held by the pipeline while it runs
that shape, and shared by pipelines of the same model through bounded stage functions.

Compilations are counted with JAX's monitoring events (the ``compiles`` fixture, conftest.py);
a stage's forward compiles as ``jit(run)``, its backward as ``jit(backward)``.
"""

import collections

import jax
import numpy as np
import optax
from two_dense_blocks import two_dense_blocks

import hardware
import popdist_emu
from popdist_emu.pipeline import STAGE_FUNCTIONS, float_mask, split_floats, stage_functions
from popdist_emu.programs import PROGRAM_CACHE, Program, ProgramKey, compile_program
from popdist_emu.runtime._replica_step import zero_accumulator

ACCUMULATION = 3
PARAMS = {f"w{i}": np.full((6, 6), 0.1, np.float32) for i in range(2)}


def shapes_of(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def batch(seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((1, ACCUMULATION, 1, 4, 6)).astype(np.float32),
        rng.standard_normal((1, ACCUMULATION, 1, 4)).astype(np.float32),
    )


def trainer(model, *, offline=False):
    """A two-stage pipelined trainer of ``model`` on one replica of two IPUs."""
    options = popdist_emu.Options(
        layout=hardware.ReplicaLayout(1, ipus_per_replica=2),
        system="pod16",
        gradient_accumulation=ACCUMULATION,
        execution_strategy=popdist_emu.PipelinedExecution("B0", "B1"),
    )
    params = shapes_of(PARAMS) if offline else PARAMS
    return popdist_emu.Trainer(model, optax.sgd(0.1), params, options, offline=offline)


# What two stages' forward and backward programs compile as, once each.
EACH_STAGE_ONCE = {"jit(run)": 2, "jit(backward)": 2}


def key_of(fn, *args):
    leaves, treedef = jax.tree.flatten(args)
    return ProgramKey(fn, treedef, tuple(leaves), False)


def stage_compiles(compiles):
    return collections.Counter(n for n in compiles if n in EACH_STAGE_ONCE)


def held_programs(t, b):
    shapes = t.step_shapes(b)
    return t.pipeline.compile(shapes.params, shapes.micro_batch)


def test_a_functional_pipelined_trainer_compiles_each_stage_program_once(compiles):
    """Steps and profiles, in either order, share one program per stage pass."""
    t, b = trainer(two_dense_blocks()), batch()
    t.step(b)
    popdist_emu.simulate(t, b)
    t.step(batch(1))
    popdist_emu.simulate(t, b)
    counts = stage_compiles(compiles)
    assert counts == EACH_STAGE_ONCE, compiles
    for program in held_programs(t, b):
        assert isinstance(program.forward, Program) and isinstance(program.backward, Program)


def test_the_stage_programs_are_kept_in_the_program_cache_and_nowhere_else(compiles):
    """The programs the steps ran are the process cache's (a lookup compiles nothing), and the
    jitted stage functions hold no executable in JAX's cache (once, dispatch kept them there)."""
    t, b = trainer(two_dense_blocks()), batch()
    t.step(b)
    compiles.clear()
    for stage, functions in zip(held_programs(t, b), t.pipeline.functions, strict=True):
        assert compile_program(functions.forward, stage.params, stage.input) is stage.forward
        dy = None if functions.last else split_floats(stage.output, float_mask(stage.output))[0]
        args = (stage.params, stage.input, dy)
        assert compile_program(functions.backward, *args) is stage.backward
        assert functions.forward._cache_size() == functions.backward._cache_size() == 0
    assert compiles == [], compiles


def test_a_live_pipeline_keeps_its_programs_and_only_the_cache_shares_them(compiles):
    """A pipelined trainer of the same model shares the stage programs while the cache keeps
    them; once the cache drops them, the live trainer keeps stepping on the programs its
    pipeline holds, and a new trainer compiles them again (nothing else kept them: JAX's jit
    cache once handed them back)."""
    model, b = two_dense_blocks(), batch()
    first = trainer(model)
    first.step(b)
    held = held_programs(first, b)
    for shared, own in zip(held_programs(trainer(model), b), held, strict=True):
        assert shared.forward is own.forward and shared.backward is own.backward
    PROGRAM_CACHE.clear()
    compiles.clear()
    first.step(batch(1))
    assert held_programs(first, b) is held
    assert stage_compiles(compiles) == {}, compiles
    trainer(model).step(b)
    assert stage_compiles(compiles) == EACH_STAGE_ONCE, compiles


def test_an_offline_pipelined_trainer_compiles_its_stage_programs_for_analysis_once(compiles):
    model = two_dense_blocks()
    offline, b = trainer(model, offline=True), shapes_of(batch())
    popdist_emu.simulate(offline, b)
    popdist_emu.simulate(offline, b)
    assert stage_compiles(compiles) == EACH_STAGE_ONCE, compiles
    functional = trainer(model)
    for analysed, run, functions in zip(
        held_programs(offline, b), held_programs(functional, b), functional.pipeline.functions,
        strict=True,
    ):  # fmt: skip
        assert analysed.forward is not run.forward  # other XLA options: programs of their own
        assert (
            compile_program(functions.forward, run.params, run.input, analysis_only=True)
            is analysed.forward
        )
        assert analysed.forward.compiled.cost_analysis() == run.forward.compiled.cost_analysis()


def test_a_hand_built_pipeline_holds_programs_no_cache_keeps(compiles):
    """Without the runtime's compile a pipeline compiles bare executables that it alone holds
    (none enters the process's cache) and computes the same bits."""
    model = two_dense_blocks()
    micro_batches = [
        (np.full((4, 6), 0.1 * m, np.float32), np.full((4,), 0.5, np.float32))
        for m in range(ACCUMULATION)
    ]
    zeros = zero_accumulator(PARAMS, np.float32)
    sums = []
    for compile_fn in (None, popdist_emu.compile_program):
        pipeline = popdist_emu.Pipeline(
            model, popdist_emu.PipelinedExecution("B0", "B1"), PARAMS, ipus_per_replica=2,
            gradient_accumulation=ACCUMULATION, compile=compile_fn,
        )  # fmt: skip
        sums.append(np.asarray(pipeline.accumulate(PARAMS, micro_batches, zeros)[0]))
        held = pipeline.compile(PARAMS, micro_batches[0])
        in_cache = [
            key_of(f.forward, stage.params, stage.input) in PROGRAM_CACHE
            for stage, f in zip(held, pipeline.functions, strict=True)
        ]
        assert in_cache == [compile_fn is not None] * 2
        if compile_fn is None:
            assert not any(isinstance(stage.forward, Program) for stage in held)
            compiles.clear()
            pipeline.accumulate(PARAMS, micro_batches, zeros)
            assert stage_compiles(compiles) == {}, compiles  # it holds its programs
    assert sums[0].tobytes() == sums[1].tobytes()


def test_the_stage_functions_kept_as_keys_are_bounded():
    """At most STAGE_FUNCTIONS stages' jitted functions are kept (each keeps its model alive):
    pipelines of more models than that evict the oldest model's."""
    assert stage_functions.cache_info().maxsize == STAGE_FUNCTIONS == 16
    first = two_dense_blocks()
    kept = stage_functions(first, ("B0",), True, False)
    assert stage_functions(first, ("B0",), True, False) is kept
    for _ in range(STAGE_FUNCTIONS):
        stage_functions(two_dense_blocks(), ("B0",), True, False)
    assert stage_functions.cache_info().currsize <= STAGE_FUNCTIONS
    assert stage_functions(first, ("B0",), True, False) is not kept
