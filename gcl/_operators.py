"""GCL's reduction operators and their elementwise NumPy kernels.

References:
    GCL User Guide, "Terminology" (operators ADD, MEAN, MUL, MIN, MAX, ...);
    poplibs ``popops/CollectiveTypes.hpp`` (``CollectiveOperator``).
"""

from __future__ import annotations

import enum

import numpy as np


class Operator(enum.Enum):
    """A reduction operator, named as in GCL's ``CollectiveOperator``.

    MEAN is ADD followed by one division by the group size at the owner of each shard, so
    it rounds exactly like ``(x[p+1] + ... + x[p]) / G`` in the ring's fixed order.
    """

    ADD = "add"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    MUL = "mul"


_KERNELS = {
    Operator.ADD: np.add,
    Operator.MEAN: np.add,
    Operator.MAX: np.maximum,
    Operator.MIN: np.minimum,
    Operator.MUL: np.multiply,
}


def as_operator(op: str | Operator) -> Operator:
    """Parse ``op`` (an :class:`Operator` or its lower-case name)."""
    if isinstance(op, Operator):
        return op
    try:
        return Operator(str(op).lower())
    except ValueError:
        names = ", ".join(repr(o.value) for o in Operator)
        raise ValueError(
            f"`op` must be one of {names} (or a gcl.Operator), got {op!r}; pass e.g. op='add'."
        ) from None


def combine_into(op: Operator, acc: np.ndarray, x: np.ndarray) -> None:
    """``acc = acc (op) x`` in place: one step of a ring reduction.

    The kernels are commutative elementwise IEEE operations, so only the sequence of
    steps (fixed by global replica indices) decides the result's bits.
    """
    _KERNELS[op](acc, x, out=acc)


def check_dtype(op: Operator, dtype: np.dtype, what: str) -> None:
    """Reject dtypes the operator cannot reduce (MEAN needs an inexact dtype)."""
    if dtype.kind not in "fciub" and dtype.name != "bfloat16":
        raise TypeError(
            f"{what} has dtype {dtype}, which GCL cannot reduce: expected a numeric dtype "
            f"(float16/32/64, bfloat16, integers); cast it before the collective."
        )
    if op is Operator.MEAN and dtype.kind in "iub":
        raise TypeError(
            f"{what} has integer dtype {dtype} and op='mean' divides by the group size: "
            f"expected a floating dtype; cast to float32 first or use op='add'."
        )


def finish_mean(op: Operator, acc: np.ndarray, group_size: int) -> None:
    """Turn a completed ADD into MEAN with one division by the group size."""
    if op is Operator.MEAN and group_size > 1:
        np.divide(acc, np.asarray(group_size, dtype=acc.dtype), out=acc)
