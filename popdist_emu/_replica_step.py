"""The compiled pieces of one replicated step: a replica's micro-step and the update.

A replica's micro-step is one jitted function of ``(params, accumulator, micro_batch)`` that
runs ``value_and_grad`` of the user's loss and adds the gradient and the loss into the
accumulator, so gradient accumulation costs no extra dispatch. Every local replica calls the
same compiled function on its own micro-batch, one call after the other: DESIGN.md measured
that ``vmap`` over replicas changes the last bits of the gradients, and a per-replica call
keeps a replica's arithmetic independent of how many replicas share its instance.

References:
    PopTorch User Guide, gradient accumulation and
    ``accumulationAndReplicationReductionType`` (Mean divides the sum over accumulation
    and replicas once, after the reduction, as MeanReductionStrategy.Post).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

Params = Any
Batch = Any
# (gradient sum over accumulated micro-batches, loss sum): what a replica contributes.
Accumulator = tuple[Any, jax.Array]


class TrainState(NamedTuple):
    """What every replica holds between steps: identical on all replicas."""

    params: Params
    opt_state: optax.OptState


class NonScalarLossError(ValueError):
    """The user's loss function returned something other than a real scalar."""


def check_scalar_loss(
    loss_fn: Callable, params: Params, micro_batch: Batch
) -> jax.ShapeDtypeStruct:
    """Traces ``loss_fn`` on shapes only and checks it returns a real scalar.

    Returns:
        The loss's shape and dtype (the accumulator's loss dtype).
    """
    out = jax.eval_shape(loss_fn, params, micro_batch)
    shape = getattr(out, "shape", None)
    dtype = getattr(out, "dtype", None)
    if shape != () or dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise NonScalarLossError(
            f"Trainer: `loss_fn(params, micro_batch)` must return a real scalar (shape ()), "
            f"got {out}; reduce the per-sample losses, e.g. with jnp.mean."
        )
    return out


@functools.lru_cache(maxsize=16)
def make_micro_step(loss_fn: Callable) -> Callable:
    """The jitted micro-step ``(params, acc, micro_batch) -> (acc', finite)``.

    Cached per loss function, so trainers of the same loss share compiled code.

    ``finite`` is False when this micro-batch's loss or gradient holds a NaN or an Inf; it is
    only read when the reduced gradient is not finite, to name the replica it came from.
    """
    value_and_grad = jax.value_and_grad(loss_fn)

    def micro_step(params: Params, acc: Accumulator, micro_batch: Batch):
        loss, grads = value_and_grad(params, micro_batch)
        leaves = jax.tree.leaves(grads)
        finite = jnp.isfinite(loss)
        for leaf in leaves:
            finite = finite & jnp.all(jnp.isfinite(leaf))
        grad_sum, loss_sum = acc
        grad_sum = jax.tree.map(jnp.add, grad_sum, grads)
        return (grad_sum, loss_sum + loss), finite

    return jax.jit(micro_step)


@functools.lru_cache(maxsize=16)
def make_update(optimizer: optax.GradientTransformation, scale: float | None) -> Callable:
    """The jitted update ``(params, opt_state, grad_sum) -> (params', opt_state')``.

    Cached per optimiser and scale, so trainers of the same optimiser share compiled code.

    Args:
        optimizer: the optax optimiser every replica applies.
        scale: multiplies the reduced gradient sum first (``1 / (replicas * accumulation)``
            for the mean reduction); None for the sum reduction.
    """

    def update(params: Params, opt_state: optax.OptState, grad_sum: Params):
        grads = grad_sum if scale is None else jax.tree.map(lambda g: g * scale, grad_sum)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    # The old params and optimiser state are dead after the update: reuse their buffers.
    return jax.jit(update, donate_argnums=(0, 1))


def zero_accumulator(params: Params, loss_dtype: Any) -> Accumulator:
    """The accumulator a replica starts each step from (shared: it is never written)."""
    return jax.tree.map(jnp.zeros_like, params), jnp.zeros((), loss_dtype)


def shape_struct(tree: Any) -> Any:
    """The tree's leaves as ``jax.ShapeDtypeStruct`` (arrays or structs accepted)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), tree)
