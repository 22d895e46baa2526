"""What a trainer checks across instances when something may have gone wrong.

Two questions need every instance's answer, so each is one small gcl collective:

- :func:`raise_non_finite`: after the reduced gradient came out NaN or Inf, which global
  replica and which micro-batch produced it first (or, if none did, that the sum itself
  overflowed);
- :func:`check_replicas_identical`: whether every instance still holds the same parameters,
  bit for bit (``Trainer(debug=True)`` asks after every step).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

import jax
import numpy as np

import gcl
from popdist_emu._options import Options
from popdist_emu.runtime._replica_step import Params

if TYPE_CHECKING:  # mpi4py.MPI initialises MPI when imported: only for the checker
    from mpi4py import MPI


class NonFiniteGradientError(FloatingPointError):
    """A replica produced a NaN or Inf loss or gradient; the message names replica and step."""


def raise_non_finite(
    flags: Sequence[Sequence[bool | jax.Array]],
    *,
    options: Options,
    step: int,
    comm: MPI.Comm | None = None,
    timeout: float | None = None,
) -> NoReturn:
    """Finds, over all instances, the first replica and micro-batch that went non-finite.

    Every instance must call it (one all-reduce of a mark per global replica).

    Args:
        flags: per local replica, the finite flags of its micro-batches in order, one each
            or an array for several computed together.
        options: the layout (replicas, this instance's offset) and the accumulation.
        step: optimiser steps done before this one, for the message.
        comm: mpi4py communicator of the instances; None is gcl's default.
        timeout: seconds a collective waits for a peer before raising.

    Raises:
        NonFiniteGradientError: always; naming the replica and micro-batch, or saying that
            the sum over replicas overflowed although every replica's gradient was finite.
    """
    local = []
    for k, replica_flags in enumerate(flags):
        marks = np.zeros(options.num_total_replicas)
        oks = np.concatenate([np.atleast_1d(np.asarray(ok)) for ok in replica_flags])
        bad = np.flatnonzero(~oks.astype(bool)).tolist()
        if bad:
            marks[options.replica_offset + k] = bad[0] + 1
        local.append(marks)
    marks = gcl.all_reduce(local, "max", comm=comm, timeout=timeout)[0]
    culprits = np.flatnonzero(marks)
    if culprits.size == 0:
        raise NonFiniteGradientError(
            f"Trainer: the gradient summed over replicas at step {step} overflowed to "
            f"Inf although every replica's gradient was finite; use reduction='mean' "
            f"with a smaller loss scale or a lower learning rate."
        )
    r = int(culprits[0])
    a = int(marks[r]) - 1
    others = f" (also replicas {culprits[1:].tolist()})" if culprits.size > 1 else ""
    raise NonFiniteGradientError(
        f"Trainer: NaN or Inf loss/gradient from global replica {r} at step {step} "
        f"(micro-batch {a} of gradient_accumulation={options.gradient_accumulation}){others}; "
        f"check that replica's input data, lower the learning rate or clip gradients."
    )


def check_replicas_identical(
    params: Params,
    *,
    num_local_replicas: int,
    step: int,
    comm: MPI.Comm | None = None,
    timeout: float | None = None,
) -> None:
    """Checks, through gcl, that every instance holds the same parameters, bit for bit.

    Each instance hashes its parameter bytes; the max and min over all replicas must agree.
    Cheap (one small all-reduce pair), so ``debug=True`` runs it every step.

    Raises:
        AssertionError: the hashes differ; the message gives the step and the range.
    """
    digest = 0
    for leaf in jax.tree.leaves(params):
        digest = zlib.crc32(np.ascontiguousarray(leaf).tobytes(), digest)
    local = [np.array([float(digest)])] * num_local_replicas
    hi = gcl.all_reduce(local, "max", comm=comm, timeout=timeout)[0][0]
    lo = gcl.all_reduce(local, "min", comm=comm, timeout=timeout)[0][0]
    if hi != lo:
        raise AssertionError(
            f"Trainer: replicas diverged after step {step}: parameter hashes "
            f"range over [{lo:.0f}, {hi:.0f}]; every instance must start from the same "
            f"params and compute under the same CPU allowance."
        )
