"""Arrays between the torch program and the JAX core: inputs to JAX, outputs back to torch.

References:
    JAX documentation, "Default dtypes and the X64 flag" (32-bit by default, as PopTorch
    casts 64-bit inputs on the IPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def to_jax_array(tensor: Any) -> np.ndarray:
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
