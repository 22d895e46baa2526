"""A two-block model for pipeline tests: ``B0`` and ``B1``, each ``tanh(h @ w{i})``, the last
returning the mean squared error of the row sums against the labels.

A fresh BlockModel on every call, so a test's compiled stage programs are its own.
"""

import jax.numpy as jnp

import popdist_emu


def _dense(name, last):
    def fn(p, x):
        h, y = x
        h = jnp.tanh(h @ p[name])
        return jnp.mean((h.sum(-1) - y) ** 2) if last else (h, y)

    return fn


def two_dense_blocks() -> popdist_emu.BlockModel:
    """Blocks ``B0`` (parameter ``w0``) and ``B1`` (``w1``, the loss)."""
    return popdist_emu.BlockModel(
        [popdist_emu.Block(f"B{i}", _dense(f"w{i}", i == 1), (f"w{i}",)) for i in range(2)]
    )
