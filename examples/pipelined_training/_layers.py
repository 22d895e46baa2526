"""A transformer's layers in plain JAX (BERT's and ViT's), and weights initialised from shapes
(every pipelined example's).

References:
    Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (multi-head attention);
    Ba et al., "Layer Normalization", 2016.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def init_from_shapes(shapes: Any, key: jax.Array, weight_std: Callable[[str, tuple], float]) -> Any:
    """Truncated-normal weights (``weight_std(path, shape)`` gives the standard deviation),
    zero biases and unit layer-norm scales, for a tree of ``ShapeDtypeStruct``.

    One compiled program makes them all: drawn one by one, each weight's shape compiled a
    sampler of its own (a third of a small model's start-up)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(shapes)

    @jax.jit
    def make(key: jax.Array) -> list:
        keys = jax.random.split(key, len(leaves))
        out = []
        for k, (path, s) in zip(keys, leaves, strict=True):
            name = jax.tree_util.keystr(path)
            if name.endswith("['scale']"):
                out.append(jnp.ones(s.shape, s.dtype))
            elif name.endswith("['b']") or name.endswith("['bias']"):
                out.append(jnp.zeros(s.shape, s.dtype))
            else:
                std = weight_std(name, s.shape)
                normal = jax.random.truncated_normal(k, -2, 2, s.shape)
                out.append((std * normal).astype(s.dtype))
        return out

    return jax.tree.unflatten(jax.tree.structure(shapes), make(key))


def layer_norm(p: Any, x: jax.Array, eps: float) -> jax.Array:
    """Layer norm computed in float32, returned in ``x``'s dtype."""
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + eps)
    return (y * p["scale"].astype(jnp.float32) + p["bias"].astype(jnp.float32)).astype(x.dtype)


def dense(p: Any, x: jax.Array) -> jax.Array:
    """``x @ w + b`` of the layer ``p``."""
    return x @ p["w"] + p["b"]


def attention(p: Any, x: jax.Array, heads: int, bias: jax.Array | None = None) -> jax.Array:
    """Multi-head self-attention (one ``qkv`` projection, softmax in float32) and its output
    projection ``out``; ``bias`` is added to the scores (an attention mask)."""
    b, s, h = x.shape
    qkv = dense(p["qkv"], x).reshape(b, s, 3, heads, h // heads)
    qh, kh, vh = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", qh, kh) / math.sqrt(h // heads)
    if bias is not None:
        scores = scores + bias.astype(scores.dtype)
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype)
    return dense(p["out"], jnp.einsum("bhqk,bkhd->bqhd", probs, vh).reshape(b, s, h))
