"""Which optimisers RTS can shard: those whose update of an element reads that element only.

Replicated tensor sharding updates each replica's owned elements of the optimiser state
separately, which is exact (bit for bit) only when the update of an element depends on that
element alone: Adam, AdamW, SGD with momentum, RMSProp, Lion... Optimisers that look across
elements (global-norm clipping, LAMB and LARS trust ratios, Adafactor's factored moments) or
across shapes (a weight-decay mask on ``ndim``) are refused, with the primitives that gave
them away. Two checks: the update's jaxpr on shapes (no values needed, offline too), and,
with a plan and values, a probe update with the elements a replica does not own zeroed.

References:
    PopART User Guide, "Tensor locations" (replicated tensor sharding of the optimiser
    state); Rajbhandari et al., "ZeRO", SC 2020 (optimiser-state partitioning).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.extend.core as jex
import numpy as np
import numpy.typing as npt

from popdist_emu.runtime._sharding import ShardingError, ShardingPlan, state_mirrors

if TYPE_CHECKING:
    from popdist_emu.runtime._replica_step import Optimiser

# Primitives that combine elements at the same index only: a shard's update then equals the
# same elements of the whole tensor's update, bit for bit.
# fmt: off
_ELEMENTWISE = frozenset({
    'abs', 'acos', 'acosh', 'add', 'and', 'asin', 'asinh', 'atan', 'atan2', 'atanh', 'cbrt',
    'ceil', 'clamp', 'conj', 'convert_element_type', 'copy', 'copy_p', 'cos', 'cosh', 'digamma',
    'div', 'eq', 'erf', 'erf_inv', 'erfc', 'exp', 'exp2', 'expm1', 'floor', 'ge', 'gt', 'imag',
    'integer_pow', 'is_finite', 'le', 'lgamma', 'log', 'log1p', 'logistic', 'lt', 'max', 'min',
    'mul', 'ne', 'neg', 'nextafter', 'not', 'or', 'pow', 'real', 'reduce_precision', 'rem',
    'round', 'rsqrt', 'select_n', 'sign', 'sin', 'sinh', 'sqrt', 'square', 'stop_gradient',
    'sub', 'tan', 'tanh', 'xor',
})
# fmt: on
# Shape operations that are harmless on a scalar (e.g. broadcasting the step count).
_SCALAR_SHAPE_OPS = frozenset({"broadcast_in_dim", "reshape", "squeeze", "expand_dims"})


def _size(var: object) -> int:
    return math.prod(getattr(getattr(var, "aval", None), "shape", ()) or ())


def _cross_element_primitives(jaxpr: jex.Jaxpr, found: set[str]) -> None:
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        subs = [
            x.jaxpr if hasattr(x, "jaxpr") else x
            for v in eqn.params.values()
            for x in (v if isinstance(v, list | tuple) else (v,))
            if hasattr(x, "eqns") or hasattr(getattr(x, "jaxpr", None), "eqns")
        ]
        if subs:  # jit, cond, while, custom_jvp...: look inside
            for sub in subs:
                _cross_element_primitives(sub, found)
            continue
        if all(_size(v) <= 1 for v in (*eqn.invars, *eqn.outvars)):
            continue  # scalar bookkeeping: step counts, schedules
        if name in _ELEMENTWISE:
            continue
        if name in _SCALAR_SHAPE_OPS and all(_size(v) <= 1 for v in eqn.invars):
            continue
        found.add(name)


def check_elementwise(optimiser: Optimiser, params: Any, plan: ShardingPlan | None = None) -> None:
    """Refuses an optimiser whose sharded update would differ from the whole-tensor update.

    RTS updates each replica's elements separately, which is exact only when the update of
    an element depends on that element alone (Adam, AdamW, SGD with momentum, RMSProp, Lion,
    ...). Optimisers that look across elements (global-norm clipping, LAMB and LARS trust
    ratios, Adafactor's factored moments) or across shapes (a weight-decay mask on ``ndim``)
    are refused. The check traces ``optimiser.update`` on shapes only and inspects the jaxpr.

    Raises:
        ShardingError: naming the cross-element primitives found, or the shape dependence.
    """
    shapes = jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(np.shape(x), np.dtype(x.dtype)), params
    )
    state = jax.eval_shape(optimiser.init, shapes)
    closed = jax.make_jaxpr(lambda g, s, p: optimiser.update(g, s, p))(shapes, state, shapes)
    found: set[str] = set()
    _cross_element_primitives(closed.jaxpr, found)
    if found:
        raise ShardingError(
            f"replicated tensor sharding needs an element-wise optimiser, but this one's update "
            f"combines elements across a tensor (primitives {sorted(found)}: e.g. a global "
            f"norm, a trust ratio or factored moments), so a shard's update would differ from "
            f"the whole tensor's; use an element-wise optimiser such as optax.adamw/adam/sgd, "
            f"popdist_emu.lamb or popdist_emu.lars for LAMB and LARS (their per-tensor norms "
            f"are reduced over the sharding domain), or turn replicated_tensor_sharding off."
        )
    if plan is not None and not _owned_elements_independent(optimiser, params, plan):
        raise ShardingError(
            "replicated tensor sharding: this optimiser's update of a replica's elements "
            "depends on elements the replica does not own (a probe update differed); use an "
            "element-wise optimiser such as optax.adamw/adam/sgd, or turn "
            "replicated_tensor_sharding off."
        )


def _owned_mask(plan: ShardingPlan, replicas: Sequence[int]) -> list[np.ndarray]:
    """Per leaf, a flat boolean mask of the elements some replica of ``replicas`` owns."""
    masks = []
    for leaf, size in enumerate(plan.sizes):
        mask = np.zeros(size, bool)
        for r in replicas:
            plan.put(leaf, r, np.ones(plan.owned(leaf, r), bool), mask)
        masks.append(mask)
    return masks


def _owned_elements_independent(optimiser: Optimiser, params: Any, plan: ShardingPlan) -> bool:
    """Two probe updates, whole vs with every element a replica does not own zeroed (its
    gradient and state), compared on the owned elements, bit for bit."""
    rng = np.random.default_rng(0)
    leaves = plan.treedef.flatten_up_to(params)
    values = plan.treedef.unflatten([np.asarray(x) for x in leaves])

    def draw() -> Any:
        return plan.treedef.unflatten(
            [rng.standard_normal(np.shape(x)).astype(np.dtype(x.dtype)) for x in leaves]
        )

    step = jax.jit(lambda g, s, p: optimiser.update(g, s, p))
    g1, g2 = draw(), draw()
    _, state = step(g1, optimiser.init(values), values)
    whole, _ = step(g2, state, values)
    mirrors = state_mirrors(plan, state)
    for p in range(plan.domain_size):
        masks = _owned_mask(plan, [p])

        def zero_others(leaf: int, x: npt.ArrayLike, masks: list[np.ndarray] = masks) -> np.ndarray:
            flat = np.asarray(x).reshape(-1).copy()
            flat[~masks[leaf]] = 0
            return flat.reshape(np.shape(x))

        grads = plan.treedef.unflatten(
            [zero_others(i, x) for i, x in enumerate(plan.treedef.flatten_up_to(g2))]
        )
        state_leaves, state_def = jax.tree_util.tree_flatten(state)
        masked = [
            x if m is None else zero_others(m, x)
            for x, m in zip(state_leaves, mirrors, strict=True)
        ]
        got, _ = step(grads, jax.tree_util.tree_unflatten(state_def, masked), values)
        for i, (a, b) in enumerate(
            zip(plan.treedef.flatten_up_to(got), plan.treedef.flatten_up_to(whole), strict=True)
        ):
            a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
            if a[masks[i]].tobytes() != b[masks[i]].tobytes():
                return False
    return True
