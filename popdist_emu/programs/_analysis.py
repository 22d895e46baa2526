"""What a compiled program and its jaxpr say about its cost: one definition of each count.

The data-parallel step and every stage of a pipeline are measured with the same four
counts, so the two profiles cannot drift apart:

- :func:`xla_cost`: XLA's ``cost_analysis()`` of a compiled program (FLOPs, bytes accessed,
  transcendentals);
- :func:`jaxpr_size`: the primitive operations of a jaxpr and its largest intermediate;
- :func:`residual_bytes`: the bytes a forward pass saves for its backward pass (the leaves of
  its vjp closure), which honour ``jax.checkpoint`` as the IPU's recomputation does;
- :func:`precision_of`: the arithmetic a model runs in.

References:
    JAX ahead-of-time lowering (``Compiled.cost_analysis()``); ``jax.vjp`` (the closure's
    leaves are the residuals).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.extend.core as jex
import numpy as np

from popdist_emu._jaxpr_run import NAME_PRIMITIVE
from popdist_emu.programs._jaxpr import sub_jaxprs
from popdist_emu.programs._op_residuals import op_runs, op_saved_values


class XlaCost(NamedTuple):
    """XLA's cost analysis of one compiled program."""

    flops: float = 0.0
    bytes_accessed: float = 0.0
    transcendentals: float = 0.0


def xla_cost(compiled: jax.stages.Compiled) -> XlaCost:
    """XLA's cost analysis of ``compiled`` as one value (jax 0.10 returns a dict; older ones
    a list of them, one per computation, summed here)."""
    analysis: Any = compiled.cost_analysis()
    parts = analysis if isinstance(analysis, list | tuple) else [analysis]
    totals = {"flops": 0.0, "bytes accessed": 0.0, "transcendentals": 0.0}
    for part in parts:
        for key in totals:
            totals[key] += float((part or {}).get(key, 0.0))
    return XlaCost(totals["flops"], totals["bytes accessed"], totals["transcendentals"])


def _aval_nbytes(aval: Any) -> int:
    # ``dtype.itemsize``, not NumPy's: a PRNG key (dropout's) has JAX's extended dtype
    # ``key<fry>`` (8 bytes), which NumPy cannot interpret.
    return math.prod(aval.shape) * aval.dtype.itemsize


class JaxprSize(NamedTuple):
    """Primitive operations of a jaxpr (its sub-jaxprs included), the bytes of its largest
    intermediate, and its operations as the program's framework records them: the
    compute-set estimate, the temporary-memory estimate and the vertex-code estimate.

    ``code_ops`` counts a traced PyTorch operation once however many primitives its
    lowering took (PopART compiles one ONNX operation, not torchax's lowering of it: a
    group norm is one operation here and dozens of primitives) and every other primitive
    as one; for a JAX program it equals ``num_ops``.
    """

    num_ops: int
    largest_bytes: int
    code_ops: int


def jaxpr_size(jaxpr: jex.Jaxpr) -> JaxprSize:
    """:class:`JaxprSize` of ``jaxpr`` (a ``Jaxpr``, not a ``ClosedJaxpr``) and its
    sub-jaxprs; a ``checkpoint_name`` is no operation. A PyTorch operation's runs are
    :func:`~popdist_emu.programs._op_residuals.op_runs`'; its sub-jaxprs are its own."""
    ops, largest, code = 0, 0, 0
    runs = op_runs(jaxpr.eqns)
    code += len({run for run in runs if run is not None})
    for eqn, run in zip(jaxpr.eqns, runs, strict=True):
        # A ``checkpoint_name`` marks a value for recomputation and computes nothing.
        counted = eqn.primitive.name != NAME_PRIMITIVE
        ops += counted
        code += counted and run is None
        for var in eqn.outvars:
            aval = var.aval
            if hasattr(aval, "shape") and hasattr(aval, "dtype"):
                largest = max(largest, _aval_nbytes(aval))
        for sub in sub_jaxprs(eqn.params):
            sub_size = jaxpr_size(sub)
            ops += sub_size.num_ops
            code += sub_size.code_ops if run is None else 0
            largest = max(largest, sub_size.largest_bytes)
    return JaxprSize(ops, largest, code)


def residual_bytes(vjp_of: Callable[..., Callable[..., tuple[Any, ...]]], *args: Any) -> int:
    """Bytes a forward pass saves for its backward pass, by tracing ``vjp_of(*args)``.

    ``vjp_of`` returns the vjp closure of the forward pass (``jax.vjp(f, ...)[1]``); its
    leaves are the residuals. Leaves that are inputs (the weights themselves, the
    micro-batch) are not activations and are left out, and a value saved twice counts once.
    In a traced PyTorch forward, the values inside one operation count as the operation's
    inputs, which PopART's gradient operation reads instead (:func:`op_saved_values`).

    Args:
        vjp_of: ``vjp_of(*args) -> vjp closure``, e.g. :func:`loss_vjp` or
            ``popdist_emu.pipeline.stage_vjp``.
        *args: its arguments, values or ``jax.ShapeDtypeStruct`` shapes.
    """
    closed = jax.make_jaxpr(vjp_of)(*args)
    inputs = set(closed.jaxpr.invars)
    residuals = [v for v in closed.jaxpr.outvars if isinstance(v, jex.Var)]
    saved = op_saved_values(closed.jaxpr, residuals)
    return int(sum(_aval_nbytes(v.aval) for v in saved if v not in inputs))


def loss_vjp(
    loss_fn: Callable[[Any, Any], jax.Array], params: Any, micro_batch: Any
) -> Callable[..., tuple[Any, ...]]:
    """The vjp closure of ``loss_fn(params, micro_batch)`` with respect to the weights: what
    one replica's forward pass saves for its backward pass."""
    return jax.vjp(lambda q: loss_fn(q, micro_batch), params)[1]


def precision_of(params: Any) -> str:
    """The arithmetic a model runs in: that of most of its floating-point weight bytes
    ("float16" for 2-byte floats, else "float32")."""
    by_width: dict[int, int] = {}
    for leaf in jax.tree.leaves(params):
        dtype = np.dtype(leaf.dtype)
        if np.issubdtype(dtype, np.floating) or dtype.name == "bfloat16":
            by_width[dtype.itemsize] = by_width.get(dtype.itemsize, 0) + math.prod(leaf.shape)
    if not by_width:
        return "float32"
    return "float16" if max(by_width, key=lambda w: by_width[w] * w) <= 2 else "float32"
