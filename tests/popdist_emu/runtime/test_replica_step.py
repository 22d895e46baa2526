"""A replica's micro-batches computed together: the micro-step's sums within float rounding,
each micro-batch's finiteness kept, and the batching bounded by the gradients' bytes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popdist_emu.runtime._replica_step import (
    BATCHED_GRADIENT_BYTES,
    make_batched_micro_steps,
    make_micro_step,
    micro_batches_per_program,
    zero_accumulator,
)


def loss_fn(params, batch):
    x, y = batch
    return jnp.mean((jnp.tanh(x @ params["w"]) + params["b"] - y) ** 2)


PARAMS = {"w": jnp.full((5, 3), 0.2, jnp.float32), "b": jnp.zeros((3,), jnp.float32)}


@settings(max_examples=10)
@given(accumulation=st.integers(1, 6), micro=st.integers(1, 4), seed=st.integers(0, 99))
def test_micro_batches_together_sum_as_one_at_a_time(accumulation, micro, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((accumulation, micro, 5)).astype(np.float32)
    y = rng.standard_normal((accumulation, micro, 3)).astype(np.float32)
    zeros = zero_accumulator(PARAMS, jnp.float32)
    step = make_micro_step(loss_fn)
    acc = zeros
    for a in range(accumulation):
        acc, _ = step(PARAMS, acc, (x[a], y[a]))
    together, finite = make_batched_micro_steps(loss_fn)(PARAMS, zeros, (x, y))
    np.testing.assert_allclose(np.asarray(together), np.asarray(acc), rtol=1e-6, atol=1e-6)
    assert finite.shape == (accumulation,) and bool(jnp.all(finite))


def test_each_micro_batch_keeps_its_finiteness():
    x = np.ones((3, 2, 5), np.float32)
    y = np.zeros((3, 2, 3), np.float32)
    x[1, 0, 0] = np.nan
    zeros = zero_accumulator(PARAMS, jnp.float32)
    _, finite = make_batched_micro_steps(loss_fn)(PARAMS, zeros, (x, y))
    assert np.asarray(finite).tolist() == [True, False, True]


@pytest.mark.parametrize(
    ("accumulation", "nbytes", "expected"),
    [
        (8, 1_000, 8),  # a small model: all its micro-batches together
        (12, BATCHED_GRADIENT_BYTES // 5, 4),  # the largest divisor of 12 within the bytes
        (7, BATCHED_GRADIENT_BYTES // 3, 1),  # 7 is prime and 7 gradients do not fit
        (96, BATCHED_GRADIENT_BYTES, 1),  # one gradient fills the budget: one at a time
        (1, 10, 1),
    ],
)
def test_how_many_micro_batches_go_together(accumulation, nbytes, expected):
    assert micro_batches_per_program(accumulation, nbytes) == expected


def test_the_programs_are_shared_per_loss_function():
    assert make_batched_micro_steps(loss_fn) is make_batched_micro_steps(loss_fn)
    assert isinstance(make_batched_micro_steps(loss_fn), type(jax.jit(lambda: 0)))
