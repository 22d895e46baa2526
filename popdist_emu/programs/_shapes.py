"""The shapes of one replica's step: what its programs are compiled for and profiled on.

A replica's step has four inputs whose shapes decide every program it compiles: the weights,
the optimiser state, one micro-batch and the loss's scalar. The flat accumulator (every
gradient element in tree order, then the loss sum) follows from the weights and the loss, so
the bytes the reduce-and-update stage moves are defined here, and the bytes a gradient
occupies on the IPU (:func:`gradient_nbytes`) once, for the data-parallel replica and every
pipeline stage alike.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from popdist_emu._trees import shape_struct as shape_struct


def flat_size(params: Any) -> int:
    """Elements of all parameter leaves: the gradient part of a flat accumulator."""
    return sum(int(np.prod(jnp.shape(leaf), dtype=np.int64)) for leaf in jax.tree.leaves(params))


def gradient_nbytes(weights: Any) -> int:
    """Bytes of the gradient of ``weights`` (a pytree of weights or of their gradients,
    arrays or shapes) and of its accumulator, as the IPU program holds them: each in its
    weight's dtype, PopART's default ("same data type as weight for the accumulator",
    ``popart.Adam``'s and ``popart.SGD``'s ``accum_type``).

    The one definition of a gradient's size for the hardware model: the replica's profile,
    every pipeline stage and every block. (The emulator's runtime accumulates a half model
    with a float32 loss in float32, for its numerics; the IPU's memory is what is modelled.)
    """
    return sum(
        flat_size(leaf) * np.dtype(jnp.result_type(leaf)).itemsize
        for leaf in jax.tree.leaves(weights)
    )


def accumulator_struct(params: Any, loss_dtype: DTypeLike) -> jax.ShapeDtypeStruct:
    """Shape of the flat accumulator: every gradient element, then the loss sum.

    Its dtype is the result type of the weights and the loss, so a half-precision model
    with a float32 loss accumulates (and reduces) in float32.
    """
    dtypes = [jnp.result_type(leaf) for leaf in jax.tree.leaves(params)]
    return jax.ShapeDtypeStruct((flat_size(params) + 1,), jnp.result_type(*dtypes, loss_dtype))


class StepShapes(NamedTuple):
    """The shapes one replica's step is compiled for (``Trainer.step_shapes(batch)``).

    Attributes:
        params: the weights, a pytree of ``jax.ShapeDtypeStruct``.
        opt_state: the whole (unsharded) optimiser state, a pytree of
            ``jax.ShapeDtypeStruct``.
        micro_batch: one micro-batch of one replica, a pytree of ``jax.ShapeDtypeStruct``
            whose leaves share the leading (sample) dimension.
        loss: the loss's shape and dtype, a real scalar.
    """

    params: Any
    opt_state: Any
    micro_batch: Any
    loss: jax.ShapeDtypeStruct

    @property
    def accumulator(self) -> jax.ShapeDtypeStruct:
        """The flat accumulator a replica contributes to the reduction (gradient, then loss)."""
        return accumulator_struct(self.params, self.loss.dtype)

    @property
    def gradient(self) -> jax.ShapeDtypeStruct:
        """The reduced flat gradient the update takes (the accumulator without its loss)."""
        acc = self.accumulator
        return jax.ShapeDtypeStruct((acc.shape[0] - 1,), acc.dtype)

    @property
    def gradient_bytes(self) -> int:
        """Bytes of one replica's gradient and of its accumulator on the IPU
        (:func:`gradient_nbytes`): the hardware model's gradient and accumulator size."""
        return gradient_nbytes(self.params)

    @property
    def micro_batch_size(self) -> int:
        """Samples per micro-batch: the leading dimension of the micro-batch's first leaf."""
        return int(np.shape(jax.tree.leaves(self.micro_batch)[0])[0])
