"""A trainer's programs come from the process's one program cache (``runtime/_compiled.py``):
trainers of the same loss, optimiser and shapes share them, the trainer keeps no store of
its own, and a live trainer keeps running the programs it holds whatever the cache evicts.

Compilations are counted with JAX's monitoring events (the ``compiles`` fixture, conftest.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import popdist_emu
from popdist_emu.programs import PROGRAM_CACHE

PARAMS = {"w": np.full((6, 3), 0.1, np.float32), "b": np.zeros((3,), np.float32)}
OPTIONS = popdist_emu.Options(replication_factor=2, gradient_accumulation=2)


def make_loss():
    # A fresh function per test: nothing is shared with programs other tests compiled.
    def loss_fn(params, batch):
        x, y = batch
        return jnp.mean((jnp.tanh(x @ params["w"]) + params["b"] - y) ** 2)

    return loss_fn


def batch(micro=4, seed=0):
    lead = (OPTIONS.device_iterations, OPTIONS.gradient_accumulation, OPTIONS.replication_factor)
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((*lead, micro, 6)).astype(np.float32),
        rng.standard_normal((*lead, micro, 3)).astype(np.float32),
    )


def shapes_of(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def test_trainers_of_the_same_loss_optimiser_and_shapes_share_every_program():
    loss_fn, optimiser, b = make_loss(), optax.adam(1e-2), batch()
    first, second = (
        popdist_emu.Trainer(loss_fn, optimiser, PARAMS, OPTIONS, offline=False).compile(b)
        for _ in range(2)
    )
    assert first.batched is not None  # two micro-batches of a replica fit together
    for name in ("micro_step", "update", "batched"):
        assert getattr(first, name) is getattr(second, name), name
    offline = popdist_emu.Trainer(loss_fn, optimiser, shapes_of(PARAMS), OPTIONS, offline=True)
    analysed = offline.compile(shapes_of(b))
    # Analysis-only programs are compiled with other XLA options: kept apart, and the batched
    # micro-steps, which only run, are not compiled offline.
    assert analysed.micro_step is not first.micro_step and analysed.update is not first.update
    assert analysed.batched is None


def test_a_live_trainer_keeps_running_its_programs_after_the_cache_drops_them(compiles):
    trainer = popdist_emu.Trainer(make_loss(), optax.sgd(0.1), PARAMS, OPTIONS, offline=False)
    reference = popdist_emu.Trainer(make_loss(), optax.sgd(0.1), PARAMS, OPTIONS, offline=False)
    b = batch()
    held = trainer.compile(b)
    trainer.step(b)
    reference.step(b)
    PROGRAM_CACHE.clear()
    compiles.clear()
    losses = [trainer.step(batch(seed=s)) for s in (1, 2)]
    assert trainer.compile(b) is held  # the programs it holds, not a recompile
    assert trainer.programs.update.program is held.update
    assert compiles == [], compiles
    assert losses == [reference.step(batch(seed=s)) for s in (1, 2)]
    jax.tree.map(np.testing.assert_array_equal, trainer.params, reference.params)


def test_a_trainer_keeps_no_programs_of_a_step_shape_it_left(compiles):
    """Only the cache keeps programs for reuse: a step shape the trainer left and the cache
    dropped compiles again when the trainer comes back to it (its own per-trainer store
    used to keep every step shape's programs, beyond the cache's bound)."""
    trainer = popdist_emu.Trainer(make_loss(), optax.sgd(0.1), PARAMS, OPTIONS, offline=False)
    trainer.compile(batch(micro=4))
    trainer.compile(batch(micro=8))
    PROGRAM_CACHE.clear()
    compiles.clear()
    back = trainer.compile(batch(micro=4))
    assert any(name.endswith("(micro_step)") for name in compiles), compiles
    assert trainer.compile(batch(micro=4)) is back
    assert trainer.step(batch(micro=4)) > 0.0
