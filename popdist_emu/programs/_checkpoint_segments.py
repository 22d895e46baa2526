"""A recomputed forward cut at its named checkpoints: what is kept, and the largest segment.

A stage that recomputes stashes its input for every micro-batch in flight and runs its
forward again in the backward pass. Where the program names checkpoints inside it
(``jax.ad_checkpoint.checkpoint_name``: PopTorch's ``recomputationCheckpoint``), PopART stashes
those values too and recomputes one segment at a time, from one checkpoint to the next, so
while a segment's backward runs it holds what that segment would have saved without
recomputation, not what the whole stage would. :func:`checkpoint_segments` measures both from
the forward's jaxpr:

- the kept bytes: the named values that are not the forward's outputs (an output is the next
  stage's input, stashed there);
- the largest segment: each run of equations between two named values, traced as a function
  of the values it reads, and its vjp residuals (``residual_bytes``; its inputs, kept
  anyway, left out).

References:
    Graphcore, "Memory and Performance Optimisation on the IPU", section 5.3.2
    (recomputation checkpoints); PopART user guide, "Recomputation" (``RecomputeType
    ::Checkpoint`` tensors are stashed, the rest of a pipeline stage recomputed); Chen, Xu,
    Zhang and Guestrin, "Training Deep Nets with Sublinear Memory Cost", arXiv:1604.06174,
    2016 (the peak of a segmented recomputation); JAX documentation, "Gradient checkpointing
    with ``jax.checkpoint``" (``checkpoint_name``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.extend.core as jex
import numpy as np

from popdist_emu._jaxpr_run import NAME_PRIMITIVE, evaluate_eqns, without_names
from popdist_emu.programs._analysis import _aval_nbytes, residual_bytes
from popdist_emu.programs._jaxpr import sub_jaxprs


class CheckpointSegments(NamedTuple):
    """A forward cut at its named checkpoints.

    Attributes:
        segments: runs of equations between named values (1: none named).
        kept_bytes: bytes of the named values that are not the forward's outputs.
        largest_bytes: the largest segment's vjp residuals (0 with one segment: the caller
            has the whole forward's).
    """

    segments: int
    kept_bytes: int
    largest_bytes: int


def checkpoint_segments(fn: Callable[..., Any], *args: Any) -> CheckpointSegments:
    """``fn(*args)``'s forward cut at the values it names with ``checkpoint_name``.

    Args:
        fn: the forward (a stage's or a block's ``fn(params, carry)``).
        *args: its arguments, values or ``jax.ShapeDtypeStruct`` shapes.
    """
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    segments: list[list[jex.JaxprEqn]] = [[]]
    named: list[jex.Var] = []
    for eqn in jaxpr.eqns:
        segments[-1].append(eqn)
        if eqn.primitive.name == NAME_PRIMITIVE:
            named.extend(eqn.outvars)
            segments.append([])
    if not named:
        return CheckpointSegments(1, 0, 0)
    outputs = {v for v in jaxpr.outvars if isinstance(v, jex.Var)}
    kept = sum(_aval_nbytes(v.aval) for v in dict.fromkeys(named) if v not in outputs)
    needed_after: list[set[jex.Var]] = []
    later = set(outputs)
    for segment in reversed(segments):
        needed_after.append(set(later))
        later |= {v for e in segment for v in e.invars if isinstance(v, jex.Var)}
    needed_after.reverse()
    largest = max(
        _segment_residuals(segment, needed)
        for segment, needed in zip(segments, needed_after, strict=True)
    )
    return CheckpointSegments(len(segments), int(kept), int(largest))


def names_checkpoints(jaxpr: jex.Jaxpr) -> bool:
    """Whether ``jaxpr`` (its sub-jaxprs too) names a value with ``checkpoint_name``, read
    from a jaxpr already made (a compiled program's), so a program without names costs no
    trace."""
    return any(
        eqn.primitive.name == NAME_PRIMITIVE
        or any(names_checkpoints(j) for j in sub_jaxprs(eqn.params))
        for eqn in jaxpr.eqns
    )


def unnamed(fn: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    """``fn`` at ``args``' shapes without its ``checkpoint_name`` equations, taking the same
    arguments and returning its outputs as a list: the forward whose vjp saves each value
    once (a named value is otherwise a second copy of the value it names)."""
    closed = without_names(jax.make_jaxpr(fn)(*args))
    flat = jex.jaxpr_as_fun(closed)
    return lambda *values: flat(*jax.tree.leaves(values))


def _segment_residuals(segment: Sequence[jex.JaxprEqn], needed: set[jex.Var]) -> int:
    """What ``segment``'s vjp saves without recomputation: its working set."""
    defined = {v for e in segment for v in e.outvars}
    reads = [v for e in segment for v in e.invars if isinstance(v, jex.Var) and v not in defined]
    inputs = list(dict.fromkeys(reads))
    outputs = [v for v in dict.fromkeys(v for e in segment for v in e.outvars) if v in needed]
    if not outputs:
        return 0
    floating = [k for k, v in enumerate(inputs) if _is_float(v.aval)]

    def vjp_of(*values: Any) -> Callable[..., Any]:
        def run(*differentiated: Any) -> list[Any]:
            env = dict(zip(inputs, values, strict=True))
            env.update((inputs[k], d) for k, d in zip(floating, differentiated, strict=True))
            return evaluate_eqns(segment, env, outputs)

        return jax.vjp(run, *(values[k] for k in floating))[1]

    avals: list[Any] = [v.aval for v in inputs]
    return residual_bytes(vjp_of, *(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals))


def _is_float(aval: Any) -> bool:
    """Whether ``aval`` holds floating-point values (differentiable)."""
    dtype = getattr(aval, "dtype", None)
    try:
        return dtype is not None and np.issubdtype(np.dtype(dtype), np.inexact)
    except TypeError:  # JAX's extended dtypes (a PRNG key) are not NumPy's
        return False
