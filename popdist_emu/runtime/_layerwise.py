"""Layer-wise adaptive optimisers (LAMB, LARS) that replicated tensor sharding can shard.

LAMB and LARS scale each tensor's update by a trust ratio ``||w|| / ||u||`` of the whole
tensor, so a replica that owns a shard of the tensor cannot compute it from its own
elements: RTS would change the update. Both are otherwise element-wise: an element-wise
direction ``u`` (LAMB: Adam's direction plus weight decay; LARS: the gradient plus weight
decay), the trust ratio, then an element-wise tail (the learning rate; LARS's momentum). So
under RTS each replica computes ``u`` for its elements, sums the squares of its elements of
``w`` and ``u`` per tensor, the sums are all-reduced over the sharding domain (two numbers
per tensor), and each replica finishes its elements with the whole tensors' norms: what
Graphcore's BERT does with LAMB and replicated tensor sharding.

Without RTS the optimiser is exactly ``optax.chain(inner, optax.scale_by_trust_ratio(...),
tail)``, the chain optax.lamb and optax.lars build, and gives their updates bit for bit.
Under RTS the norms are summed in float64 on the host from each replica's elements, then
rounded once: equal to the whole-tensor update within float32 rounding of the norm, and the
same bits on any instance layout of the same sharding domain.

References:
    You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
    ICLR 2020 (LAMB). You et al., "Large Batch Training of Convolutional Networks", 2017
    (LARS). optax documentation: ``optax.lamb``, ``optax.lars``,
    ``optax.scale_by_trust_ratio``. Graphcore, MLPerf Training v2.0 BERT
    (mlcommons/training_results_v2.0): LAMB with replicated tensor sharding.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from popdist_emu.programs import Program, compile_program
from popdist_emu.runtime._replica_step import (
    JITTED_FUNCTIONS,
    Optimiser,
    Params,
    unflatten_like,
)
from popdist_emu.runtime._sharding import ShardingPlan

# A clip of the weight's norm for each weight, by its name in the parameters' dict: sorted
# ``(name, clip or None)`` pairs, hashable as the jitted passes' cache key needs.
ClipByName = tuple[tuple[str, float | None], ...]


class LayerwiseOptimiser(NamedTuple):
    """An optax optimiser ``chain(inner, scale_by_trust_ratio, tail)`` whose parts are known.

    ``init`` and ``update`` are the chain's, so it is used wherever an optax
    ``GradientTransformation`` is; the runtime reads the parts to shard it.

    Attributes:
        init: the chain's ``init``.
        update: the chain's ``update``.
        inner: the element-wise transformation before the trust ratio.
        tail: the element-wise transformation after it.
        trust_coefficient: multiplies the trust ratio (LARS's ``trust_coefficient``).
        eps: added to the update's norm (LARS's ``eps``).
        max_weight_norm: the weight's norm in the ratio is clipped to it (PopTorch's LAMB
            ``max_weight_norm``: phi(z) = min(z, max_weight_norm)); None: not clipped; or
            :data:`ClipByName` pairs, one clip (or None) for each weight by its name in the
            parameters' dict, as LAMB's parameter groups may set them.
    """

    init: Callable
    update: Callable
    inner: optax.GradientTransformation
    tail: optax.GradientTransformation
    trust_coefficient: float = 1.0
    eps: float = 0.0
    max_weight_norm: float | ClipByName | None = None


def layerwise(
    inner: optax.GradientTransformation,
    tail: optax.GradientTransformation,
    *,
    trust_coefficient: float = 1.0,
    eps: float = 0.0,
    max_weight_norm: float | ClipByName | None = None,
) -> LayerwiseOptimiser:
    """``optax.chain(inner, optax.scale_by_trust_ratio(...), tail)`` with its parts kept;
    with ``max_weight_norm``, the weight's norm in the ratio clipped to it (one value for
    every weight, or one for each by name)."""
    if max_weight_norm is None:
        ratio = optax.scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps)
    else:
        ratio = _clipped_trust_ratio(trust_coefficient, eps, max_weight_norm)
    chain = optax.chain(inner, ratio, tail)
    return LayerwiseOptimiser(
        chain.init, chain.update, inner, tail, trust_coefficient, eps, max_weight_norm
    )


def _trust_ratio(
    w_norm: jax.Array, u_norm: jax.Array, coefficient: float, eps: float, clip: float | None
) -> jax.Array:
    """``optax.scale_by_trust_ratio``'s ratio from the norms, the weight's norm clipped to
    ``clip`` when given (PopTorch's LAMB); 1 where either norm is 0."""
    if clip is not None:
        w_norm = jnp.minimum(w_norm, jnp.asarray(clip, w_norm.dtype))
    ratio = coefficient * w_norm / (u_norm + eps)
    zero = jnp.logical_or(w_norm == 0.0, u_norm == 0.0)
    return jnp.where(zero, jnp.array(1.0, dtype=w_norm.dtype), ratio)


def _clip_of(path: tuple[Any, ...], clip: float | ClipByName | None) -> float | None:
    """The clip of the weight at ``path`` in the parameters' dict: ``clip`` itself unless it
    names one per weight (a stage's or a shard's dict keeps the weights' names)."""
    if not isinstance(clip, tuple):
        return clip
    name = str(getattr(path[-1], "key", "")) if path else ""
    clips = dict(clip)
    if name not in clips:
        raise ValueError(
            f"max_weight_norm names a clip for each weight, but none for {name or path!r}; "
            "name every weight of the parameters' dict."
        )
    return clips[name]


def _clipped_trust_ratio(
    coefficient: float, eps: float, clip: float | ClipByName
) -> optax.GradientTransformation:
    """``optax.scale_by_trust_ratio`` with the weight's norm clipped to ``clip``."""

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        def scale(path: tuple[Any, ...], u: jax.Array, w: jax.Array) -> jax.Array:
            norms = jnp.linalg.norm(w), jnp.linalg.norm(u)
            ratio = _trust_ratio(*norms, coefficient, eps, _clip_of(path, clip))
            return u * ratio.astype(u.dtype)

        return jax.tree_util.tree_map_with_path(scale, updates, params), state

    def init(params: Any) -> optax.EmptyState:
        del params
        return optax.EmptyState()

    return optax.GradientTransformation(init, update)


def lamb(
    learning_rate: optax.ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
    mask: Any = None,
) -> LayerwiseOptimiser:
    """LAMB as ``optax.lamb`` (same arguments, same updates), shardable by RTS."""
    return layerwise(
        optax.chain(
            optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root),
            optax.add_decayed_weights(weight_decay, mask),
        ),
        optax.scale_by_learning_rate(learning_rate),
    )


def lars(
    learning_rate: optax.ScalarOrSchedule,
    weight_decay: float = 0.0,
    weight_decay_mask: Any = True,
    trust_coefficient: float = 0.001,
    eps: float = 0.0,
    momentum: float = 0.9,
    nesterov: bool = False,
) -> LayerwiseOptimiser:
    """LARS as ``optax.lars`` with its trust ratio on every tensor, shardable by RTS."""
    return layerwise(
        optax.add_decayed_weights(weight_decay, mask=weight_decay_mask),
        optax.chain(
            optax.scale_by_learning_rate(learning_rate),
            optax.trace(decay=momentum, nesterov=nesterov),
        ),
        trust_coefficient=trust_coefficient,
        eps=eps,
    )


class LayerwiseUpdate(NamedTuple):
    """The sharded update of a :class:`LayerwiseOptimiser` in two compiled passes.

    Attributes:
        direction: ``(params, inner_state, grad_flat) -> (u, inner_state')``: the reduced
            gradient scaled as the runtime's update scales it, then ``inner``.
        finish: ``(params, u, norms, tail_state) -> (params', tail_state')``: the trust
            ratio from the whole tensors' norms (``norms[0]`` of the weights, ``norms[1]``
            of ``u``, one per leaf), then ``tail``, then the update applied.
    """

    direction: jax.stages.Wrapped
    finish: jax.stages.Wrapped
    trust_coefficient: float
    eps: float


@functools.lru_cache(maxsize=JITTED_FUNCTIONS)
def layerwise_update(optimiser: LayerwiseOptimiser, scale: float | None) -> LayerwiseUpdate:
    """The two jitted passes of ``optimiser``'s sharded update.

    Cached per optimiser and scale, like ``make_update``: the passes are the keys that make
    stages of the same optimiser share compiled programs, not a program store
    (``JITTED_FUNCTIONS``); they are compiled only through :class:`LayerwisePrograms`.
    """
    inner, tail = optimiser.inner, optimiser.tail
    coefficient, eps = optimiser.trust_coefficient, optimiser.eps
    clip = optimiser.max_weight_norm

    def direction(params: Params, inner_state: Any, grad_flat: jax.Array) -> tuple[Any, Any]:
        if scale is not None:
            grad_flat = grad_flat * scale
        return inner.update(unflatten_like(params, grad_flat), inner_state, params)

    def finish(params: Params, u: Any, norms: jax.Array, tail_state: Any) -> tuple[Params, Any]:
        leaves, treedef = jax.tree.flatten(u)
        weights = jax.tree_util.tree_flatten_with_path(params)[0]  # the same structure as u
        scaled = []
        for i, (x, (path, w)) in enumerate(zip(leaves, weights, strict=True)):
            # optax.scale_by_trust_ratio's formula, on the whole tensor's norms.
            w_norm, u_norm = norms[0, i].astype(w.dtype), norms[1, i].astype(w.dtype)
            ratio = _trust_ratio(w_norm, u_norm, coefficient, eps, _clip_of(path, clip))
            scaled.append(x * ratio)
        updates, tail_state = tail.update(jax.tree.unflatten(treedef, scaled), tail_state, params)
        return optax.apply_updates(params, updates), tail_state

    return LayerwiseUpdate(jax.jit(direction), jax.jit(finish), coefficient, eps)


class LayerwisePrograms:
    """A sharded stage's two layer-wise passes, compiled through ``compile_program`` on their
    first call and held while the stage lives (what it runs is never evicted under it).

    The stage calls them on full-shape weights, optimiser state and flat gradient, fixed by
    its sharding plan, so the first call's shapes are the only ones: a program is compiled
    once per pass, and an executable called with other shapes refuses them (``TypeError``)
    rather than compiling again.

    Args:
        passes: the jitted passes (:func:`layerwise_update`), the programs' keys.
    """

    def __init__(self, passes: LayerwiseUpdate) -> None:
        self.passes = passes
        self._held: dict[str, Program] = {}

    @property
    def programs(self) -> tuple[Program | None, Program | None]:
        """The compiled ``(direction, finish)`` the stage holds; None for a pass not run yet."""
        return self._held.get("direction"), self._held.get("finish")

    def _run(self, name: str, fn: jax.stages.Wrapped, label: str, *args: Any) -> Any:
        """Pass ``name`` on ``args``, compiled on its first call."""
        program = self._held.get(name)
        if program is None:
            program = self._held[name] = compile_program(fn, *args, label=label)
        return program(*args)

    def direction(
        self, params: Params, inner_state: Any, grad_flat: jax.Array | np.ndarray
    ) -> tuple[Any, Any]:
        """:attr:`LayerwiseUpdate.direction`, compiled."""
        label = "the layer-wise update's direction"
        return self._run("direction", self.passes.direction, label, params, inner_state, grad_flat)

    def finish(
        self, params: Params, u: Any, norms: np.ndarray, tail_state: Any
    ) -> tuple[Params, Any]:
        """:attr:`LayerwiseUpdate.finish`, compiled."""
        label = "the layer-wise update's trust ratio and tail"
        return self._run("finish", self.passes.finish, label, params, u, norms, tail_state)


def layerwise_programs(optimiser: Optimiser, scale: float | None) -> LayerwisePrograms | None:
    """A sharded stage's compiled passes of ``optimiser``'s update; None for an optimiser
    that is not a :class:`LayerwiseOptimiser` (its update is element-wise)."""
    if not isinstance(optimiser, LayerwiseOptimiser):
        return None
    return LayerwisePrograms(layerwise_update(optimiser, scale))


def owned_squares(plan: ShardingPlan, replica: int, params: Params, u: Any) -> np.ndarray:
    """``replica``'s part of every leaf's squared norm, of the weights and of ``u``.

    Float64 sums of the elements the replica owns; a whole (unsharded) leaf is counted by
    the first replica of each domain only, so the sum over the domain is the whole norm.

    Returns:
        Shape ``(2, leaves)``: row 0 the weights', row 1 the direction's.
    """
    first = replica % plan.domain_size == 0
    out = np.zeros((2, len(plan.sizes)), np.float64)
    for row, tree in enumerate((params, u)):
        for leaf, x in enumerate(plan.treedef.flatten_up_to(tree)):
            if plan.sharded[leaf]:
                owned = plan.take(leaf, replica, np.asarray(x)).astype(np.float64)
            elif first:
                owned = np.asarray(x, np.float64).reshape(-1)
            else:
                continue
            out[row, leaf] = np.dot(owned, owned)
    return out


def norms_from_squares(squares: np.ndarray) -> np.ndarray:
    """The whole tensors' norms from the domain's summed squares, rounded once to float32."""
    return np.sqrt(squares).astype(np.float32)
