"""Arrays between the torch program and the JAX core: inputs to JAX, outputs back to torch.

A call's combined batch is laid out ``[device_iterations, gradient_accumulation, replicas,
micro_batch, *sample]`` (outermost first), and what the step computes per micro-batch comes
back laid end to end in that order, so the outputs of sample ``i`` are row ``i`` of the
combined outputs whatever the layout.

References:
    JAX documentation, "Default dtypes and the X64 flag" (32-bit by default, as PopTorch
    casts 64-bit inputs on the IPU); PopTorch User Guide, "Efficient data batching"
    (combined batch size) and ``outputMode``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

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
    """JAX arrays (in any nesting of tuples and lists) as torch tensors."""
    if isinstance(value, tuple | list):
        return type(value)(to_torch(v) for v in value)
    return torch.from_numpy(np.array(value))


def combined_layout(
    arrays: tuple[np.ndarray, ...], iterations: int, accumulation: int, replicas: int
) -> tuple[np.ndarray, ...]:
    """The combined batch reshaped ``[iterations, accumulation, replicas, micro_batch, ...]``.

    Raises:
        ValueError: a batch that is not a multiple of ``iterations x accumulation x
            replicas`` in every input.
    """
    size = arrays[0].shape[0]
    per_call = iterations * accumulation * replicas
    if size % per_call or any(a.shape[0] != size for a in arrays):
        raise ValueError(
            f"poptorch model called with a batch of {size}: the combined batch must be a "
            f"multiple of device iterations x gradient accumulation x replicas = {per_call} "
            f"in every input (use poptorch.DataLoader with the same options)."
        )
    micro = size // per_call
    return tuple(a.reshape(iterations, accumulation, replicas, micro, *a.shape[1:]) for a in arrays)


def per_sample(outputs: Sequence[object], grown: Sequence[object], micro_batch_size: int) -> bool:
    """Whether every one of ``outputs`` (one micro-batch's shapes) is a tensor per sample, so
    that micro-batches' outputs laid end to end are the combined batch's: its first dimension
    is the micro-batch, and for a micro-batch one sample larger (``grown``, the same outputs'
    shapes) it is one longer with the rest unchanged. The second size tells a weight or a
    statistic whose first dimension only happens to equal the micro-batch from a per-sample
    tensor."""
    if len(outputs) != len(grown):
        return False
    return all(
        isinstance(o, jax.ShapeDtypeStruct)
        and isinstance(g, jax.ShapeDtypeStruct)
        and o.ndim >= 1
        and o.shape[0] == micro_batch_size
        and g.shape == (micro_batch_size + 1, *o.shape[1:])
        for o, g in zip(outputs, grown, strict=True)
    )


def outputs_per_sample(
    outputs_fn: Callable[[Weights, MicroBatch], Any],
    params: Weights,
    batch: HostBatch,
    out: object,
) -> bool:
    """Whether the forward's outputs ``out`` (of one micro-batch of the laid-out ``batch``,
    ``[iterations, accumulation, replicas, micro, ...]``; its last output the loss) are
    per-sample tensors (:func:`per_sample`), traced again one sample larger with
    ``outputs_fn(params, micro_batch)``; a forward tied to its batch size is not."""
    if not isinstance(out, tuple | list) or len(out) < 2:
        return False
    size = batch[0].shape[3]
    grown = tuple(jax.ShapeDtypeStruct((size + 1, *a.shape[4:]), a.dtype) for a in batch)
    try:
        larger = jax.eval_shape(outputs_fn, params, grown)
    except Exception:
        return False
    return per_sample(out[:-1], larger[:-1], size)


def end_to_end(outputs: Iterable[np.ndarray], all_iterations: bool) -> list[np.ndarray]:
    """Per-micro-batch outputs, leaves ``[iterations, accumulation, replicas, micro, ...]``,
    as rows of the combined batch: every device iteration's (``OutputMode.All``) or the last
    one's."""
    keep = slice(None) if all_iterations else slice(-1, None)
    return [o[keep].reshape(-1, *o.shape[4:]) for o in outputs]
