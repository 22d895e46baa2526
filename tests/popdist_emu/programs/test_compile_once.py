"""Each program of a step is compiled once per process, functional and offline alike: the
hardware model analyses the executables the trainer compiled, and the trainer runs them (a
replica's micro-batches through one program where they fit together).

Compilations are counted with JAX's monitoring events (the ``compiles`` fixture, conftest.py).
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import optax
from two_dense_blocks import two_dense_blocks

import popdist_emu


def make_loss():
    # A fresh function per test: nothing is shared with programs other tests compiled.
    def loss_fn(params, batch):
        x, y = batch
        return jnp.mean((jnp.tanh(x @ params["w"]) + params["b"] - y) ** 2)

    return loss_fn


PARAMS = {"w": np.full((6, 3), 0.1, np.float32), "b": np.zeros((3,), np.float32)}


def batch(options, micro=4, steps=1):
    lead = (options.device_iterations, options.gradient_accumulation, options.replication_factor)
    rng = np.random.default_rng(0)
    return [
        (
            rng.standard_normal((*lead, micro, 6)).astype(np.float32),
            rng.standard_normal((*lead, micro, 3)).astype(np.float32),
        )
        for _ in range(steps)
    ]


def test_a_functional_run_compiles_each_program_once(compiles):
    options = popdist_emu.Options(replication_factor=2, gradient_accumulation=2)
    trainer = popdist_emu.Trainer(make_loss(), optax.adam(1e-2), PARAMS, options, offline=False)
    batches = batch(options, steps=3)
    simulation = popdist_emu.simulate(trainer, batches[0])
    for b in batches:
        trainer.step(b)
    popdist_emu.simulate(trainer, batches[0])
    counts = collections.Counter(compiles)
    # The optimiser's init, the micro-step (the hardware model's), the micro-steps of a
    # replica's micro-batches together (what runs) and the update; each exactly once.
    assert len(counts) == 4 and set(counts.values()) == {1}, counts
    assert any("micro_steps" in name for name in counts)
    assert any(name.endswith("(micro_step)") for name in counts)
    assert any("update" in name for name in counts)
    assert simulation.profile.grad_flops > 0


def test_an_offline_run_compiles_each_program_once(compiles):
    options = popdist_emu.Options(replication_factor=2, gradient_accumulation=2)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), PARAMS)
    trainer = popdist_emu.Trainer(make_loss(), optax.adam(1e-2), shapes, options, offline=True)
    batch_shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch(options)[0])
    popdist_emu.simulate(trainer, batch_shapes)
    compiled = trainer.compile(batch_shapes)
    popdist_emu.simulate(trainer, batch_shapes)
    counts = collections.Counter(compiles)
    assert len(counts) == 2 and set(counts.values()) == {1}, counts
    assert compiled.micro_step.compiled.cost_analysis()


def test_the_same_program_is_shared_within_the_process(compiles):
    loss_fn = make_loss()
    options = popdist_emu.Options(replication_factor=2)
    trainers = [
        popdist_emu.Trainer(loss_fn, optax.sgd(0.1), PARAMS, options, offline=False)
        for _ in range(2)
    ]
    b = batch(options)[0]
    steps = [t.compile(b) for t in trainers]
    assert steps[0].micro_step is steps[1].micro_step
    assert popdist_emu.compile_program(
        trainers[0].grad_fn, *trainers[0].example_args(b)["micro_step"]
    ) is (steps[0].micro_step)


def test_an_offline_program_is_analysed_as_the_program_that_runs():
    """Offline mode compiles for analysis only (no backend code optimisation): XLA's cost and
    memory analyses, which the hardware model reads, equal those of the program that runs,
    and the analysis-only program still computes the same values."""
    loss_fn = make_loss()
    options = popdist_emu.Options(replication_factor=2, gradient_accumulation=2)
    trainers = [
        popdist_emu.Trainer(loss_fn, optax.adam(1e-2), PARAMS, options, offline=offline)
        for offline in (False, True)
    ]
    b = batch(options)[0]
    run, analysed = (t.compile(b) for t in trainers)
    assert run.micro_step is not analysed.micro_step
    for a, o in ((run.micro_step, analysed.micro_step), (run.update, analysed.update)):
        assert a.compiled.cost_analysis() == o.compiled.cost_analysis()
        ma, mo = a.compiled.memory_analysis(), o.compiled.memory_analysis()
        for field in ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes"):
            assert getattr(ma, field) == getattr(mo, field), field
    args = trainers[0].example_args(b)["micro_step"]
    values = jax.tree.map(lambda s: np.ones(s.shape, s.dtype), args)
    for r, a in zip(
        jax.tree.leaves(run.micro_step(*values)),
        jax.tree.leaves(analysed.micro_step(*values)),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(r), np.asarray(a), rtol=1e-6)


def test_a_functional_pipeline_runs_the_stage_programs_it_profiled(compiles, monkeypatch):
    """The stage programs the profile compiles are the ones the steps call (the pipeline holds
    them): the steps after ``simulate`` compile no stage forward or backward again."""
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    model = two_dense_blocks()
    params = {f"w{i}": np.full((6, 6), 0.1, np.float32) for i in range(2)}
    options = popdist_emu.Options(
        replication_factor=1,
        gradient_accumulation=3,
        execution_strategy=popdist_emu.PipelinedExecution("B0", "B1"),
    )
    trainer = popdist_emu.Trainer(model, optax.sgd(0.1), params, options, offline=False)
    rng = np.random.default_rng(0)
    b = (
        rng.standard_normal((1, 3, 1, 4, 6)).astype(np.float32),
        rng.standard_normal((1, 3, 1, 4)).astype(np.float32),
    )
    compiles.clear()
    popdist_emu.simulate(trainer, b, system="pod16")
    profiled = [name for name in compiles if "run" in name or "backward" in name]
    assert len(profiled) == 4, compiles  # each stage's forward and backward
    compiles.clear()
    trainer.step(b)
    trainer.step(b)
    assert not [name for name in compiles if "run" in name or "backward" in name], compiles
