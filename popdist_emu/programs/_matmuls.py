"""The matmuls and convolutions of a step, read from its jaxpr, and a per-operation setting.

The convolution planner model (``hardware._planner``) plans every matmul and convolution
of the program that runs: the ``dot_general`` and ``conv_general_dilated`` equations of the
step's jaxpr (sub-jaxprs included, so ``jax.checkpoint`` recomputation and the backward
pass count), with their shapes and dtypes.

``set_available_memory(x, 0.2)`` is PopTorch's per-operation setting: it marks ``x`` with a
custom identity primitive that stays in the jaxpr (and lowers to nothing), so the analysis
finds the operation that produced ``x`` and gives it its own proportion. Under ``jax.grad``
the mark follows the cotangent, so the backward matmuls/convolutions of that operation get
the same setting, as PopART's gradient operations inherit the forward operation's options.

References:
    PopTorch User Guide, ``poptorch.set_available_memory`` and
    ``Options.setAvailableMemoryProportion``; JAX "Defining new JAX primitives" (impl,
    abstract evaluation, lowering, JVP and transpose rules).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import jax
import jax.extend.core as jex
import numpy as np
from jax.core import ShapedArray
from jax.interpreters import ad, batching, mlir

from hardware import PARTIALS_TYPES, ConvOp, check_proportion
from popdist_emu.programs._jaxpr import sub_jaxprs

_FORWARD, _TANGENT, _COTANGENT = "forward", "tangent", "cotangent"
MATMUL_PRIMITIVES = ("dot_general", "conv_general_dilated")

available_memory_p = jex.Primitive("available_memory_proportion")

# A value (an array or a pytree of them) that comes back unchanged.
T = TypeVar("T")


def _impl(x: jax.Array, *, proportion: float, role: str) -> jax.Array:
    return x


available_memory_p.def_impl(_impl)
available_memory_p.def_abstract_eval(lambda x, *, proportion, role: x)
mlir.register_lowering(available_memory_p, lambda ctx, x, **_: [x])


def _jvp(
    primals: Sequence[jax.Array],
    tangents: Sequence[jax.Array | ad.Zero],
    *,
    proportion: float,
    role: str,
) -> tuple[jax.Array, jax.Array | ad.Zero]:
    (x,), (t,) = primals, tangents
    out = available_memory_p.bind(x, proportion=proportion, role=role)
    if type(t) is ad.Zero:
        return out, t
    return out, available_memory_p.bind(t, proportion=proportion, role=_TANGENT)


def _transpose(
    ct: jax.Array | ad.Zero, x: ad.UndefinedPrimal, *, proportion: float, role: str
) -> tuple[jax.Array | ad.Zero]:
    if type(ct) is ad.Zero:
        return (ct,)
    return (available_memory_p.bind(ct, proportion=proportion, role=_COTANGENT),)


def _batch(
    args: Sequence[jax.Array], dims: Sequence[int | None], *, proportion: float, role: str
) -> tuple[jax.Array, int | None]:
    return available_memory_p.bind(args[0], proportion=proportion, role=role), dims[0]


ad.primitive_jvps[available_memory_p] = _jvp
ad.primitive_transposes[available_memory_p] = _transpose
batching.primitive_batchers[available_memory_p] = _batch


def set_available_memory(x: T, proportion: float) -> T:
    """``x`` unchanged, with the operation that produced it planned under ``proportion``.

    PopTorch's ``poptorch.set_available_memory(x, 0.2)`` for a JAX model: call it on the
    output of a matmul or convolution (a pytree of them is accepted). The planner model
    then gives that operation, and its backward operations, their own available memory
    proportion instead of the IPU's.

    Raises:
        ValueError: a proportion outside (0, 1].
    """
    value = check_proportion(proportion)
    return jax.tree.map(
        lambda leaf: available_memory_p.bind(leaf, proportion=value, role=_FORWARD), x
    )


def _array_aval(atom: jex.Var | jex.Literal) -> ShapedArray:
    """The abstract value of a matmul's or a convolution's operand or result: an array's
    (``Var.aval`` is typed as any ``AbstractValue``, which declares no shape)."""
    return cast(ShapedArray, atom.aval)


def _conv_op(eqn: jex.JaxprEqn, name: str, proportion: float | None, partials: int) -> ConvOp:
    out = _array_aval(eqn.outvars[0])
    lhs, rhs = _array_aval(eqn.invars[0]), _array_aval(eqn.invars[1])
    nbytes = np.dtype(lhs.dtype).itemsize
    if eqn.primitive.name == "dot_general":
        (lc, rc), (lb, _) = eqn.params["dimension_numbers"]
        free_l = [d for d in range(len(lhs.shape)) if d not in lc and d not in lb]
        free_r = [
            d
            for d in range(len(rhs.shape))
            if d not in rc and d not in eqn.params["dimension_numbers"][1][1]
        ]
        reduction = math.prod(lhs.shape[d] for d in lc)
        return ConvOp(
            name=name,
            kind="matmul",
            groups=max(math.prod(lhs.shape[d] for d in lb), 1),
            rows=max(math.prod(lhs.shape[d] for d in free_l), 1),
            columns=max(math.prod(rhs.shape[d] for d in free_r), 1),
            reduction=max(reduction, 1),
            depth=max(reduction, 1),
            dtype_bytes=nbytes,
            available_memory_proportion=proportion,
            partials_bytes=partials,
        )
    dn = eqn.params["dimension_numbers"]
    groups = int(eqn.params["feature_group_count"]) * int(eqn.params["batch_group_count"])
    out_spec, rhs_spec = dn.out_spec, dn.rhs_spec
    depth = rhs.shape[rhs_spec[1]]
    window = math.prod(rhs.shape[d] for d in rhs_spec[2:])
    return ConvOp(
        name=name,
        kind="conv",
        groups=max(groups, 1),
        rows=max(out.shape[out_spec[0]] * math.prod(out.shape[d] for d in out_spec[2:]), 1),
        columns=max(out.shape[out_spec[1]] // max(groups, 1), 1),
        reduction=max(depth * window, 1),
        depth=max(depth, 1),
        dtype_bytes=nbytes,
        available_memory_proportion=proportion,
        partials_bytes=partials,
    )


def _overrides(jaxpr: jex.Jaxpr) -> dict[int, float]:
    """Equation index -> proportion set by ``set_available_memory`` in this jaxpr."""
    producer: dict[jex.Var, int] = {}
    consumers: dict[jex.Var, list[int]] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for var in eqn.outvars:
            producer[var] = i
        for atom in eqn.invars:
            if isinstance(atom, jex.Var):
                consumers.setdefault(atom, []).append(i)
    found: dict[int, float] = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive is not available_memory_p:
            continue
        value, role = eqn.params["proportion"], eqn.params["role"]
        if role in (_FORWARD, _TANGENT):
            source = eqn.invars[0]
            targets = [producer[source]] if source in producer else []
        else:
            targets = consumers.get(eqn.outvars[0], [])
        for i in targets:
            if jaxpr.eqns[i].primitive.name in MATMUL_PRIMITIVES:
                found[i] = value
    return found


# Equations whose sub-jaxpr takes the equation's operands in order (a call): a weight
# passed in is the same weight inside.
_CALLS = frozenset(
    {"pjit", "jit", "closed_call", "core_call", "remat", "remat2", "checkpoint", "custom_jvp_call",
     "custom_vjp_call", "custom_vjp_call_jaxpr"}
)  # fmt: skip


def _with_weight(op: ConvOp, eqn: jex.JaxprEqn, weights: dict[jex.Var, str] | None) -> ConvOp:
    """``op`` with its weight fields for ``eqn``: unknown (as made) without ``weights``
    (var -> key), else the key of the weight its right-hand operand is, or not a weight."""
    if weights is None:
        return op
    key = weights.get(eqn.invars[1]) if isinstance(eqn.invars[1], jex.Var) else None
    if key:
        return dataclasses.replace(op, weight_key=key)
    return dataclasses.replace(op, weight_live=False)


def matmul_ops(
    jaxpr: jex.Jaxpr | jex.ClosedJaxpr,
    *,
    prefix: str = "",
    partials_type: str = "float",
    weights: int | None = None,
    weight_prefix: str = "",
) -> tuple[ConvOp, ...]:
    """Every ``dot_general`` and ``conv_general_dilated`` of ``jaxpr`` (and its sub-jaxprs).

    Each gets a unique name, ``<primitive> #<n> <lhs shape> x <rhs shape>``, which the
    planner's warning quotes. ``partials_type`` is PopLibs' ``partialsType`` ("float", the
    default, or "half").

    ``weights``: how many of the jaxpr's first inputs are the model's weights (a step's or
    a stage's parameters come first). Each operation then says whether its right-hand
    operand is one of them (``ConvOp.weight_key``: ``<weight_prefix>weight <i>``, the same
    in a stage's forward and backward programs, followed into calls such as
    ``jax.checkpoint``) or a value the step computes (``weight_live`` False), so the
    planner lays each weight out once. Without it (None), or inside a loop or branch,
    every right-hand operand is taken for a weight of its own.
    """
    if partials_type not in PARTIALS_TYPES:
        raise ValueError(
            f"`partials_type` must be one of {tuple(PARTIALS_TYPES)}, got {partials_type!r}."
        )
    partials = PARTIALS_TYPES[partials_type]
    open_jaxpr: jex.Jaxpr = jaxpr.jaxpr if isinstance(jaxpr, jex.ClosedJaxpr) else jaxpr
    ops: list[ConvOp] = []

    def walk(jp: jex.Jaxpr, keys: dict[jex.Var, str] | None) -> None:
        overrides = _overrides(jp)
        for i, eqn in enumerate(jp.eqns):
            if eqn.primitive.name in MATMUL_PRIMITIVES:
                lhs, rhs = _array_aval(eqn.invars[0]), _array_aval(eqn.invars[1])
                name = (
                    f"{prefix}{eqn.primitive.name} #{len(ops)} "
                    f"{'x'.join(map(str, lhs.shape))} * {'x'.join(map(str, rhs.shape))}"
                )
                op = _conv_op(eqn, name, overrides.get(i), partials)
                ops.append(_with_weight(op, eqn, keys))
            for sub in sub_jaxprs(eqn.params):
                inner = None
                if (
                    keys is not None
                    and eqn.primitive.name in _CALLS
                    and len(sub.invars) == len(eqn.invars)
                ):
                    inner = {
                        s: keys[o]
                        for s, o in zip(sub.invars, eqn.invars, strict=True)
                        if isinstance(o, jex.Var) and o in keys
                    }
                walk(sub, inner)

    top = (
        None
        if weights is None
        else {v: f"{weight_prefix}weight {i}" for i, v in enumerate(open_jaxpr.invars[:weights])}
    )
    walk(open_jaxpr, top)
    return tuple(ops)


def step_matmuls(fn: Callable[..., object], *args: Any) -> tuple[ConvOp, ...]:
    """The matmuls and convolutions of ``fn(*args)`` (arrays or ``ShapeDtypeStruct``)."""
    return matmul_ops(jax.make_jaxpr(fn)(*args))
