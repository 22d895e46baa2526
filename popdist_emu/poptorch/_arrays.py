"""Arrays between the torch program and the JAX core: inputs to JAX, outputs back to torch.

A call's combined batch is laid out ``[device_iterations, gradient_accumulation, replicas,
micro_batch, *sample]`` (outermost first); what the step computes per micro-batch comes
back in the same order (``_outputs``).

References:
    JAX documentation, "Default dtypes and the X64 flag" (32-bit by default, as PopTorch
    casts 64-bit inputs on the IPU); PopTorch User Guide, "Efficient data batching"
    (combined batch size) and ``outputMode``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np
import numpy.typing as npt
import torch

# A module's weights by torchax's names; one micro-batch's arrays in the forward's order; a
# call's arrays on the host, laid out ``[iterations, accumulation, replicas, micro, ...]``.
Weights = dict[str, jax.Array]
MicroBatch = tuple[jax.Array, ...]
HostBatch = tuple[np.ndarray, ...]


def to_jax_array(tensor: torch.Tensor | npt.ArrayLike) -> np.ndarray:
    """A host array of ``tensor`` in JAX's default precision (int64 -> int32, f64 -> f32)."""
    array = (
        tensor.detach().cpu().numpy() if isinstance(tensor, torch.Tensor) else np.asarray(tensor)
    )
    if array.dtype == np.int64:
        return array.astype(np.int32)
    if array.dtype == np.float64:
        return array.astype(np.float32)
    return array


def to_torch(value: Any) -> Any:
    """Arrays (in any nesting of tuples, lists and dicts) as torch tensors."""
    return jax.tree.map(lambda leaf: torch.from_numpy(np.array(leaf)), value)


def combined_layout(
    arrays: tuple[np.ndarray, ...], iterations: int, accumulation: int, replicas: int
) -> tuple[np.ndarray, ...]:
    """The combined batch reshaped ``[iterations, accumulation, replicas, micro_batch, ...]``.

    Each input is split on its own, as PopTorch splits it: inputs may differ in size (ViT's
    pre-training passes 2 images and 1 mixup coefficient per micro-batch).

    Raises:
        ValueError: an input that is not a multiple of ``iterations x accumulation x
            replicas``.
    """
    per_call = iterations * accumulation * replicas
    for a in arrays:
        if a.ndim == 0 or a.shape[0] % per_call:
            raise ValueError(
                f"poptorch model called with a batch of {a.shape[0] if a.ndim else 0}: the "
                f"combined batch must be a multiple of device iterations x gradient "
                f"accumulation x replicas = {per_call} in every input (use "
                f"poptorch.DataLoader with the same options)."
            )
    return tuple(
        a.reshape(iterations, accumulation, replicas, a.shape[0] // per_call, *a.shape[1:])
        for a in arrays
    )


class LaidOutBatch(NamedTuple):
    """A training call's batch, each leaf laid out ``[iterations, accumulation, replicas,
    micro]``: the module's ``inputs`` leaves, then the samples' indices when ``keyed`` (the
    module draws random numbers keyed by a micro-batch's first sample)."""

    leaves: HostBatch
    inputs: int
    keyed: bool

    def micro_batch(self, d: int, a: int, k: int) -> tuple[MicroBatch, Any]:
        """Replica ``k``'s micro-batch ``a`` of device iteration ``d``, and its first
        sample's index (0 when the module draws nothing)."""
        micro = tuple(leaf[d, a, k] for leaf in self.leaves[: self.inputs])
        return micro, self.leaves[-1][d, a, k][0] if self.keyed else np.int32(0)
