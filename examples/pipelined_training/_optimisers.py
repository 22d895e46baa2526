"""Optimisers computed in float32 whatever the weights' precision, their state stored in the
precision the examples' flags say (BERT's LAMB and AdamW, ViT's LAMB)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

import popdist_emu
from popdist_emu.runtime import layerwise


def in_float32(
    inner: optax.GradientTransformation,
    state_dtype: Any = jnp.float32,
    first_moment_dtype: Any = None,
) -> optax.GradientTransformation:
    """``inner`` computed in float32 whatever the weights' precision, the floats of its state
    stored as ``state_dtype``, the first moment (optax's ``mu``) as ``first_moment_dtype``
    where given (float16 with a float32 second moment).

    Graphcore's BERT and ViT keep the moments in float32 unless their configuration says
    FLOAT16 (PopART's accumulator types default to FLOAT). Computing in float16 fails: Adam's
    ``eps`` (1e-8) rounds to zero, a squared gradient below 6e-8 underflows, and a weight
    whose gradient and moments are zero would get 0/0. So the gradients, weights and stored
    state are read as float32, and the updates cast back to each gradient's dtype.
    """
    first = state_dtype if first_moment_dtype is None else first_moment_dtype

    def cast_one(x: Any, dtype: Any) -> Any:
        return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x

    def cast(tree: Any, dtype: Any) -> Any:
        return jax.tree.map(lambda x: cast_one(x, dtype), tree)

    def store(state: Any) -> Any:
        # optax's ScaleByAdamState names its first moment ``mu``.
        def one(path: Any, x: Any) -> Any:
            is_first = any(getattr(key, "name", None) == "mu" for key in path)
            return cast_one(x, first if is_first else state_dtype)

        return jax.tree_util.tree_map_with_path(one, state)

    def init(params: Any) -> Any:
        return store(inner.init(cast(params, jnp.float32)))

    # The names are optax's TransformUpdateFn's: (updates, state, params).
    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        weights = None if params is None else cast(params, jnp.float32)
        grads = updates
        steps, state = inner.update(cast(grads, jnp.float32), cast(state, jnp.float32), weights)
        steps = jax.tree.map(lambda u, g: u.astype(g.dtype), steps, grads)
        return steps, store(state)

    return optax.GradientTransformation(init, update)


def adamw_in_float32(
    learning_rate: float, state_dtype: Any = jnp.float32, first_moment_dtype: Any = None
) -> optax.GradientTransformation:
    """``optax.adamw`` through :func:`in_float32`: float16 moments as PopART's ``accl1_type``
    (which PopART BERT's ``use_half_optimizer_state`` sets) and PopTorch's
    ``first_order_momentum_accum_type`` (Graphcore's PopTorch BERT's
    ``enable_half_first_order_momentum``) store them."""
    return in_float32(optax.adamw(learning_rate), state_dtype, first_moment_dtype)


def lamb_in_float32(
    learning_rate: float, state_dtype: Any = jnp.float32, first_moment_dtype: Any = None
) -> Any:
    """``popdist_emu.lamb`` (shardable by RTS) with its Adam moments through
    :func:`in_float32`: float32 by default, as Graphcore's LAMB keeps them; float16 where its
    BERT's ``lamb_m_dtype`` (the first moment) or ``lamb_accl_dtype`` (both) says FLOAT16.
    The trust ratio and the tail run as ``popdist_emu.lamb``'s."""
    base = popdist_emu.lamb(learning_rate)
    return layerwise(in_float32(base.inner, state_dtype, first_moment_dtype), base.tail)
