"""The working set of recomputation (``popdist_emu.programs.recompute_working_bytes``): the
largest segment between kept values, which its backward holds on top of them."""

import functools

import jax
import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

from popdist_emu.programs import loss_vjp, recompute_working_bytes, residual_bytes

W = jax.ShapeDtypeStruct((128, 128), jnp.float32)
X = jax.ShapeDtypeStruct((32, 128), jnp.float32)
LAYERS = 4


def _layers(x, w, marks=()):
    for k in range(LAYERS):
        x = jnp.tanh(x @ w)
        if k in marks:
            x = checkpoint_name(x, "kept")
    return x


def plain(w, x):
    return jnp.sum(_layers(x, w))


def whole(w, x):
    return jnp.sum(jax.checkpoint(lambda x: _layers(x, w))(x))


def named(w, x):
    keep = jax.checkpoint_policies.save_only_these_names("kept")
    return jnp.sum(jax.checkpoint(lambda x: _layers(x, w, marks=(1,)), policy=keep)(x))


def _kept(loss):
    return residual_bytes(functools.partial(loss_vjp, loss), W, X)


def test_a_forward_recomputed_whole_holds_what_it_would_have_kept():
    assert recompute_working_bytes(plain, W, X) == 0  # nothing recomputed
    assert _kept(whole) == 0  # the inputs only, which are not activations
    assert recompute_working_bytes(whole, W, X) == _kept(plain) > 0


def test_a_named_checkpoint_splits_the_segment_in_two():
    # Kept: the checkpoint after layer 1; recomputed one at a time: layers 0-1, then 2-3,
    # each holding half of what the whole forward would keep.
    activation = 32 * 128 * 4
    assert _kept(named) == activation
    assert recompute_working_bytes(named, W, X) == _kept(plain) // 2


def test_the_largest_of_several_checkpoints_counts_once():
    def two(w, x):
        x = jax.checkpoint(lambda x: jnp.tanh(x @ w))(x)  # one layer
        return jnp.sum(jax.checkpoint(lambda x: _layers(x, w))(x))  # four layers

    assert recompute_working_bytes(two, W, X) == _kept(plain)


def test_integer_and_key_inputs_of_a_segment_are_not_differentiated():
    """A segment that reads the labels and a dropout key (JAX's extended key dtype)."""

    def dropout_loss(w, batch):
        x, labels, key = batch

        def head(x):
            h = jnp.tanh(x @ w)
            keep = jax.random.bernoulli(key, 0.9, h.shape)
            return jnp.where(keep, h, 0.0) * labels[:, None]

        return jnp.sum(jax.checkpoint(head)(x))

    batch = (
        X,
        jax.ShapeDtypeStruct((32,), jnp.int32),
        jax.eval_shape(lambda: jax.random.key(0)),
    )
    working = recompute_working_bytes(dropout_loss, W, batch)
    assert working >= 32 * 128 * 4  # at least the tanh output
    plain_dropout = functools.partial(loss_vjp, dropout_loss)
    assert residual_bytes(plain_dropout, W, batch) < working


@pytest.mark.parametrize("loss", [plain, whole, named])
def test_the_working_set_never_exceeds_the_whole_forward(loss):
    assert recompute_working_bytes(loss, W, X) <= _kept(plain)
