"""Byte counts of pytrees: the project's one definition of a tree's size.

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
