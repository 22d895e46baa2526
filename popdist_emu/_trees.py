"""Byte counts of pytrees (the project's one definition of a tree's size) and a leaf as a
compiled program sees it (the one definition of a program's argument shape).

Imported only by modules that already use JAX (its pytree registry is what defines a leaf),
never by the JAX-free PopDist path.
"""

from __future__ import annotations

import math

import jax
import numpy as np


def tree_nbytes(tree: object) -> int:
    """Bytes of the array leaves of a pytree.

    A leaf counts when it has a shape and a dtype: arrays of any framework and
    ``jax.ShapeDtypeStruct`` alike, so the same count serves real values and offline shapes.
    Other leaves (ints, strings, flags) are metadata and count as zero; ``None`` is no leaf.

    Args:
        tree: any pytree (dicts, lists, tuples, NamedTuples, registered classes).

    Returns:
        The total ``prod(shape) * itemsize`` over the array leaves.
    """
    total = 0
    for leaf in jax.tree.leaves(tree):
        dtype = getattr(leaf, "dtype", None)
        if dtype is None or not hasattr(leaf, "shape"):
            continue
        total += math.prod(np.shape(leaf)) * np.dtype(dtype).itemsize
    return int(total)


def shape_struct(
    x: jax.typing.ArrayLike, shape: tuple[int, ...] | None = None
) -> jax.ShapeDtypeStruct:
    """``x`` as a compiled program sees it: its shape (or ``shape``) and its dtype made
    canonical as ``jit`` does with a host array (int64 is int32 unless ``jax_enable_x64``;
    JAX 0.12 warns when a ``ShapeDtypeStruct`` is asked for a dtype it then truncates)."""
    dtype = getattr(x, "dtype", None)
    return jax.ShapeDtypeStruct(
        tuple(np.shape(x)) if shape is None else shape,
        jax.dtypes.canonicalize_dtype(dtype if dtype is not None else np.result_type(x)),
        weak_type=bool(getattr(x, "weak_type", False)),
    )


def as_shape(x: jax.typing.ArrayLike | jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    """A program's argument as its shape: a ``jax.ShapeDtypeStruct`` as given, an array as
    :func:`shape_struct` (so programs compiled from values and from shapes share cache keys)."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    return shape_struct(x)
