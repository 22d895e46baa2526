"""A recomputed forward cut at its named checkpoints (``programs.checkpoint_segments``), and
the same forward without the names (``programs.unnamed``)."""

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from popdist_emu.pipeline import stage_vjp
from popdist_emu.programs import checkpoint_segments, residual_bytes, unnamed

W = jax.ShapeDtypeStruct((128, 128), jnp.float32)
X = jax.ShapeDtypeStruct((32, 128), jnp.float32)
ACTIVATION = 32 * 128 * 4


def _layers(w, x, marks=()):
    for k in range(4):
        x = jnp.tanh(x @ w)
        if k in marks:
            x = checkpoint_name(x, "kept")
    return x


def _saved(fn):
    return residual_bytes(functools.partial(stage_vjp, fn), W, X)


def test_a_forward_without_names_is_one_segment():
    assert checkpoint_segments(_layers, W, X) == (1, 0, 0)


def test_a_named_value_inside_splits_the_forward_and_is_kept():
    named = functools.partial(_layers, marks=(1,))
    cut = checkpoint_segments(named, W, X)
    assert cut.segments == 2 and cut.kept_bytes == ACTIVATION
    assert cut.largest_bytes == _saved(_layers) // 2  # two layers of four


def test_a_named_output_is_not_kept_again():
    """The last value is the next stage's input, stashed there."""
    cut = checkpoint_segments(functools.partial(_layers, marks=(3,)), W, X)
    assert cut.kept_bytes == 0 and cut.largest_bytes == _saved(_layers)


def test_without_its_names_a_forward_saves_each_value_once():
    named = functools.partial(_layers, marks=(1,))
    assert _saved(named) == _saved(_layers) + ACTIVATION  # the named copy, saved again
    assert _saved(unnamed(named, W, X)) == _saved(_layers)
    x = jnp.linspace(-1, 1, 32 * 128).reshape(32, 128)
    w = jnp.eye(128) * 0.5
    assert jnp.array_equal(unnamed(named, W, X)(w, x)[0], named(w, x))
