"""The working set of recomputation: what a recomputed segment holds while its backward runs.

A forward pass under ``jax.checkpoint`` saves only what its policy keeps (nothing, or the
values it names: PopART's recomputation checkpoints), and the vjp residuals that
``residual_bytes`` measures are those kept values. The backward pass then recomputes one
segment at a time, from one kept value to the next, and for that segment's backward holds
everything the segment would have saved without recomputation: its working set, live on top
of the kept values. Graphcore's IPU guide states the trade ("the activations between the
checkpoints are recomputed during the backward pass"), and PopART's ``RecomputeAll``
recomputes each interval between checkpoints on its own. So the peak of a step that
recomputes is its kept values plus the largest segment's working set;
:func:`recompute_working_bytes` measures that largest segment from the step's jaxpr:

- every ``jax.checkpoint`` of the forward (nested ones too) is split at the equations whose
  outputs its policy saves (``checkpoint_name`` under ``save_only_these_names``, a matmul
  under ``dots_saveable``...); without a policy it is one segment;
- each segment is traced as a function of the values it reads, and the bytes its vjp would
  save (:func:`residual_bytes` of it, without recomputation; its inputs, kept anyway, left
  out) are its working set.

References:
    Graphcore, "Memory and Performance Optimisation on the IPU", section 5.3
    (recomputation and checkpoints); PopART ``willow/src/recompute.cpp``
    (github.com/graphcore/popart: ``annotateRecomputeAll``); Chen, Xu, Zhang and Guestrin,
    "Training Deep Nets with Sublinear Memory Cost", arXiv:1604.06174, 2016 (the peak of a
    segmented recomputation: the kept values plus one segment's); JAX documentation,
    "Gradient checkpointing with ``jax.checkpoint``" (policies).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.extend.core as jex
import numpy as np

from popdist_emu.programs._analysis import residual_bytes
from popdist_emu.programs._jaxpr import evaluate_eqns, sub_jaxprs

# ``jax.checkpoint``'s primitive: "remat2" from JAX 0.4.14 on, "checkpoint" before.
_REMAT = frozenset({"remat2", "checkpoint"})


def recompute_working_bytes(
    loss_fn: Callable[[Any, Any], Any], params: Any, micro_batch: Any
) -> int:
    """Bytes the largest recomputed segment of ``loss_fn(params, micro_batch)``'s forward
    holds while its backward runs; 0 for a forward that recomputes nothing.

    Args:
        loss_fn: ``loss_fn(params, micro_batch) -> scalar``, as for ``loss_vjp``.
        params, micro_batch: values or ``jax.ShapeDtypeStruct`` shapes.
    """
    closed = jax.make_jaxpr(loss_fn)(params, micro_batch)
    return max((_largest_segment(eqn) for eqn in _remats(closed.jaxpr)), default=0)


def _remats(jaxpr: jex.Jaxpr) -> Iterator[jex.JaxprEqn]:
    """Every ``jax.checkpoint`` equation of ``jaxpr`` and of the jaxprs inside it."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _REMAT:
            yield eqn
        for sub in sub_jaxprs(eqn.params):
            yield from _remats(sub)


def _largest_segment(remat: jex.JaxprEqn) -> int:
    """The largest working set among the segments of one ``jax.checkpoint``."""
    inner: jex.Jaxpr = remat.params["jaxpr"]
    policy = remat.params.get("policy")
    segments: list[list[jex.JaxprEqn]] = [[]]
    for eqn in inner.eqns:
        segments[-1].append(eqn)
        avals = [v.aval for v in eqn.invars]
        if policy is not None and policy(eqn.primitive, *avals, **eqn.params):
            segments.append([])  # a saved value ends a segment
    needed_after: list[set[jex.Var]] = []
    later = {v for v in inner.outvars if isinstance(v, jex.Var)}
    for segment in reversed(segments):
        needed_after.append(set(later))
        later |= {v for e in segment for v in e.invars if isinstance(v, jex.Var)}
    needed_after.reverse()
    return max(
        _segment_residuals(segment, needed)
        for segment, needed in zip(segments, needed_after, strict=True)
    )


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
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    return residual_bytes(vjp_of, *shapes)


def _is_float(aval: Any) -> bool:
    """Whether ``aval`` holds floating-point values (differentiable)."""
    dtype = getattr(aval, "dtype", None)
    try:
        return dtype is not None and np.issubdtype(np.dtype(dtype), np.inexact)
    except TypeError:  # JAX's extended dtypes (a PRNG key) are not NumPy's
        return False
