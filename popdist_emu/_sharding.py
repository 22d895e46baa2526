"""Replicated tensor sharding (RTS) of the optimiser state over a sharding domain of replicas.

Without RTS every replica holds the whole optimiser state and applies the same update. With
RTS each replica of a sharding domain (a GCL group of ``k`` replicas) holds and updates about
``1/k`` of every large tensor's state, and the updated parameter pieces are all-gathered, as
ZeRO stage 1 does. Shards have ``ceil(N / G)`` elements, zero-padded at the end: the layout
``gcl.reduce_scatter`` produces (30 elements over 4 replicas: shards of 8, holding 8, 8, 8
and 6 real elements). PopART spreads the padding instead (8, 8, 7, 7, through GCL's
CollectiveBalancedReorder); the memory per replica is the same, and following gcl's layout
is what keeps the shards bit-compatible with its all-reduce.

Bit-identity with the non-RTS path is the design constraint. ``gcl.all_reduce`` sums each
element in a ring order fixed by the element's shard position among ALL replicas, so reducing
within a smaller domain first (and then across domains) would add in a different order and
change the last bits. Hence the composition, for ``R`` replicas and domains of ``k`` (``D =
R / k`` domains):

1. ``gcl.reduce_scatter`` of the whole gradient tree over ``All``, with the runtime's op and
   method: replica ``r`` gets all-shard ``r`` (``ceil(N / R)`` elements per leaf), bit-identical
   to those elements of ``gcl.all_reduce`` (``all_gather(reduce_scatter(x)) == all_reduce(x)``).
2. With several domains, ``gcl.all_gather`` over ``Orthogonal(D)`` (replicas ``p, p + k, ...``)
   copies the all-shards of the replicas at the same position of every domain: replica ``(d,
   p)`` then holds all-shards ``p, p + k, ..., p + (D - 1) k``, its ``1/k`` of the tensor.
   Copies only, no arithmetic, so the bits stay those of the all-reduce.
3. Each replica updates only its elements (element-wise optimisers only, checked).
4. ``gcl.all_gather`` over the domain (``Consecutive(k)``) rebuilds the full parameters.

Traffic equals PopART's reduce-scatter in the domain + all-reduce across domains + all-gather:
``N[(R - 1)/R + (D - 1)/R + (k - 1)/k]`` elements per replica either way. Tensors smaller than
the threshold stay whole: their reduced gradient is all-gathered from step 1 and every replica
updates them.

References:
    PopART User Guide, "Tensor locations" (replicated tensor sharding, ceil(N/R) shards with
    zero padding, ``minElementsForReplicatedTensorSharding`` defaulting to the replica count,
    ``shardingDomain``: CommGroup(Consecutive, local replicas) across instances, ``All`` not
    supported with several instances). Rajbhandari et al., "ZeRO: Memory Optimizations Toward
    Training Trillion Parameter Models", SC 2020 (optimiser-state partitioning, stage 1).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

import gcl


class ShardingError(ValueError):
    """An RTS configuration the emulator (or PopART) refuses; the message names the fix."""


# -- shard sizes and the shard / unshard pair ---------------------------------------------------
def shard_size(num_elements: int, domain_size: int) -> int:
    """Elements per shard: ``ceil(num_elements / domain_size)`` (0 for an empty tensor)."""
    if domain_size < 1:
        raise ShardingError(f"`domain_size` must be >= 1, got {domain_size}.")
    return -(-num_elements // domain_size)


def padded_size(num_elements: int, domain_size: int) -> int:
    """Elements after zero padding: ``domain_size * shard_size``."""
    return domain_size * shard_size(num_elements, domain_size)


def shard_real_elements(num_elements: int, domain_size: int) -> tuple[int, ...]:
    """Real (non-padding) elements in each shard; the padding sits at the end of the last."""
    s = shard_size(num_elements, domain_size)
    return tuple(max(0, min(s, num_elements - p * s)) for p in range(domain_size))


def _shard_leaf(x: Any, position: int, domain_size: int) -> np.ndarray:
    x = np.asarray(x)
    s = shard_size(x.size, domain_size)
    out = np.zeros(s, x.dtype)
    real = x.reshape(-1)[position * s : (position + 1) * s]
    out[: real.size] = real
    return out


def shard(tree: Any, position: int, domain_size: int) -> Any:
    """Shard ``position`` of every leaf: a 1-D array of ``ceil(N / domain_size)`` elements.

    The same layout as ``gcl.reduce_scatter``'s output for the replica at ``position``.
    """
    if not 0 <= position < domain_size:
        raise ShardingError(
            f"`position` must lie in [0, {domain_size}) for a domain of {domain_size} "
            f"replicas, got {position}."
        )
    return jax.tree_util.tree_map(lambda x: _shard_leaf(x, position, domain_size), tree)


def unshard(shards: Sequence[Any], like: Any) -> Any:
    """The inverse of :func:`shard`: the shards of positions ``0..G-1`` -> full leaves.

    ``like`` gives each leaf's shape and dtype (arrays or ``jax.ShapeDtypeStruct``).
    """
    like_leaves, treedef = jax.tree_util.tree_flatten(like)
    per_shard = [treedef.flatten_up_to(s) for s in shards]
    out = []
    for i, ref in enumerate(like_leaves):
        flat = np.concatenate([np.asarray(s[i]).reshape(-1) for s in per_shard])
        out.append(flat[: math.prod(ref.shape)].reshape(ref.shape).astype(ref.dtype, copy=False))
    return jax.tree_util.tree_unflatten(treedef, out)


# -- sharding domains ---------------------------------------------------------------------------
def resolve_domain(domain: Any, *, num_replicas: int, num_instances: int = 1) -> int:
    """The sharding-domain size ``k`` for ``domain``, with PopART's defaults and limits.

    Args:
        domain: None (the default: every replica with one instance, each instance's local
            replicas with several), ``gcl.All()``, ``gcl.Consecutive(k)`` or an int ``k``.
        num_replicas: replicas of the job.
        num_instances: host instances of the job.

    Raises:
        ShardingError: ``All`` with several instances (PopART refuses it), an ``Orthogonal``
            group, or a size that does not divide the replica count.
    """
    local = num_replicas // num_instances
    if domain is None:
        return num_replicas if num_instances == 1 else local
    if isinstance(domain, gcl.All):
        if num_instances > 1:
            raise ShardingError(
                f"sharding domain gcl.All() is not supported with {num_instances} instances "
                f"(as in PopART, where CommGroupType::All is refused with multiple instances): "
                f"use gcl.Consecutive({local}) (each instance's local replicas, the default "
                f"when the domain is None)."
            )
        return num_replicas
    if isinstance(domain, gcl.Orthogonal):
        raise ShardingError(
            f"sharding domain {domain!r} is not supported: a domain must be consecutive "
            f"replicas; use gcl.Consecutive(k) or gcl.All()."
        )
    k = domain.k if isinstance(domain, gcl.Consecutive) else domain
    if not isinstance(k, int) or isinstance(k, bool) or k < 1 or num_replicas % k:
        divisors = [d for d in range(1, num_replicas + 1) if num_replicas % d == 0]
        raise ShardingError(
            f"sharding domain {domain!r} must be a group size that divides the "
            f"{num_replicas} replicas: expected one of {divisors}; e.g. "
            f"gcl.Consecutive({local}) for each instance's replicas."
        )
    return k


# -- the plan: which leaves are sharded and which elements each replica owns --------------------
@dataclasses.dataclass(frozen=True)
class ShardingPlan:
    """Which leaves are sharded and how, for ``num_replicas`` replicas in domains of
    ``domain_size``.

    Replica ``r`` (domain ``d = r // k``, position ``p = r % k``) owns, of every sharded leaf,
    the all-shards ``p, p + k, ..., p + (D - 1) k`` of ``ceil(N / R)`` elements each (one
    contiguous shard when ``D = 1``): its *view*. Leaves smaller than ``min_elements`` are whole
    in every view.

    Attributes:
        num_replicas: replicas of the job (``R``).
        domain_size: replicas per sharding domain (``k``).
        min_elements: leaves with fewer elements stay whole.
        shapes: each leaf's shape, in ``jax.tree_util`` order.
        dtypes: each leaf's dtype.
        sharded: whether each leaf is sharded.
        treedef: the parameter tree's structure.
    """

    num_replicas: int
    domain_size: int
    min_elements: int
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[np.dtype, ...]
    sharded: tuple[bool, ...]
    treedef: Any

    @property
    def num_domains(self) -> int:
        """Domains of the job (``D = R / k``): each holds a full copy of the state."""
        return self.num_replicas // self.domain_size

    def view_size(self, leaf: int) -> int:
        """Elements of leaf ``leaf`` in one replica's view (padding included)."""
        n = math.prod(self.shapes[leaf])
        if not self.sharded[leaf]:
            return n
        return self.num_domains * shard_size(n, self.num_replicas)

    def view_nbytes(self) -> int:
        """Bytes of one replica's view of the parameter tree: the optimiser-state bytes per
        replica are this times the state's copies per parameter (2 for Adam's mu and nu)."""
        return sum(self.view_size(i) * self.dtypes[i].itemsize for i in range(len(self.shapes)))

    def full_nbytes(self) -> int:
        """Bytes of the parameter tree without sharding."""
        return sum(math.prod(s) * d.itemsize for s, d in zip(self.shapes, self.dtypes, strict=True))

    def view_shapes(self) -> Any:
        """One replica's view as ``jax.ShapeDtypeStruct`` leaves (for memory models and for
        ``jax.eval_shape(optimizer.init, plan.view_shapes())``)."""
        return self.treedef.unflatten(
            [
                jax.ShapeDtypeStruct(
                    (self.view_size(i),) if self.sharded[i] else self.shapes[i], self.dtypes[i]
                )
                for i in range(len(self.shapes))
            ]
        )

    def local_view(self, tree: Any, replica: int) -> Any:
        """Replica ``replica``'s view of a full tree (parameters): its elements of each
        sharded leaf as a 1-D array, whole leaves unchanged."""
        leaves = self.treedef.flatten_up_to(tree)
        d, k, r = self.num_domains, self.domain_size, self.num_replicas
        p = replica % k
        out = []
        for i, leaf in enumerate(leaves):
            if not self.sharded[i]:
                out.append(leaf)
                continue
            x = np.asarray(leaf).reshape(-1)
            s = shard_size(x.size, r)
            padded = np.zeros(r * s, x.dtype)
            padded[: x.size] = x
            out.append(padded.reshape(d, k, s)[:, p, :].reshape(-1))
        return self.treedef.unflatten(out)

    def assemble(self, views: Sequence[Any]) -> Any:
        """The full tree from the views of positions ``0..k-1`` of one domain."""
        if len(views) != self.domain_size:
            raise ShardingError(
                f"assemble: expected the views of all {self.domain_size} positions of a domain, "
                f"got {len(views)}."
            )
        flat = [self.treedef.flatten_up_to(v) for v in views]
        return self.treedef.unflatten(
            [self._assemble_leaf(i, [f[i] for f in flat]) for i in range(len(self.shapes))]
        )

    def _assemble_leaf(self, i: int, pieces: Sequence[Any]) -> Any:
        if not self.sharded[i]:
            return pieces[0]
        return self.unview(i, np.concatenate([np.asarray(x).reshape(-1) for x in pieces]))

    def unview(self, i: int, gathered: np.ndarray) -> np.ndarray:
        """Leaf ``i`` from its views of positions ``0..k-1`` concatenated (what an all-gather
        over the domain returns): undoes the interleaving and drops the padding."""
        n = math.prod(self.shapes[i])
        s = shard_size(n, self.num_replicas)
        blocks = np.asarray(gathered).reshape(self.domain_size, self.num_domains, s)
        return blocks.transpose(1, 0, 2).reshape(-1)[:n].reshape(self.shapes[i])


def plan_sharding(
    params: Any,
    *,
    num_replicas: int,
    num_instances: int = 1,
    domain: Any = None,
    min_elements: int | None = None,
) -> ShardingPlan:
    """Plans RTS of ``params``' optimiser state.

    Args:
        params: the parameter tree (arrays or ``jax.ShapeDtypeStruct``).
        num_replicas: replicas of the job.
        num_instances: host instances (decides the default domain and refuses ``All``).
        domain: the sharding domain (see :func:`resolve_domain`).
        min_elements: leaves with fewer elements stay whole; default: the domain size, as
            PopART's ``minElementsForReplicatedTensorSharding`` defaults to the replica count.
    """
    k = resolve_domain(domain, num_replicas=num_replicas, num_instances=num_instances)
    threshold = k if min_elements is None else min_elements
    if threshold < 0:
        raise ShardingError(f"`min_elements` must be >= 0, got {min_elements}.")
    leaves, treedef = jax.tree_util.tree_flatten(params)
    shapes = tuple(tuple(int(n) for n in np.shape(x)) for x in leaves)
    sizes = [math.prod(s) for s in shapes]
    return ShardingPlan(
        num_replicas=num_replicas,
        domain_size=k,
        min_elements=threshold,
        shapes=shapes,
        dtypes=tuple(np.dtype(x.dtype) for x in leaves),
        sharded=tuple(n > 0 and n >= threshold and k > 1 for n in sizes),
        treedef=treedef,
    )


# -- which optimisers can be sharded ------------------------------------------------------------
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


def _size(var: Any) -> int:
    return math.prod(getattr(getattr(var, "aval", None), "shape", ()) or ())


def _cross_element_primitives(jaxpr: Any, found: set[str]) -> None:
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


def check_elementwise(optimizer: Any, params: Any, plan: ShardingPlan | None = None) -> None:
    """Refuses an optimiser whose sharded update would differ from the whole-tensor update.

    RTS updates each replica's elements separately, which is exact only when the update of
    an element depends on that element alone (Adam, AdamW, SGD with momentum, RMSProp, Lion,
    ...). Optimisers that look across elements (global-norm clipping, LAMB and LARS trust
    ratios, Adafactor's factored moments) or across shapes (a weight-decay mask on ``ndim``)
    are refused. The check traces ``optimizer.update`` on shapes only and inspects the jaxpr.

    Raises:
        ShardingError: naming the cross-element primitives found, or the shape dependence.
    """
    shapes = jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(np.shape(x), np.dtype(x.dtype)), params
    )
    state = jax.eval_shape(optimizer.init, shapes)
    closed = jax.make_jaxpr(lambda g, s, p: optimizer.update(g, s, p))(shapes, state, shapes)
    found: set[str] = set()
    _cross_element_primitives(closed.jaxpr, found)
    if found:
        raise ShardingError(
            f"replicated tensor sharding needs an element-wise optimiser, but this one's update "
            f"combines elements across a tensor (primitives {sorted(found)}: e.g. a global "
            f"norm, a trust ratio or factored moments), so a shard's update would differ from "
            f"the whole tensor's; use an element-wise optimiser such as optax.adamw/adam/sgd, "
            f"or turn replicated_tensor_sharding off."
        )
    if plan is not None and not _same_update_on_views(optimizer, params, plan):
        raise ShardingError(
            "replicated tensor sharding: this optimiser's update of a 1-D shard differs from the "
            "same elements of the whole tensor's update, so it depends on parameter shapes "
            "(e.g. a weight-decay mask on `ndim`); use a mask keyed on parameter names, or "
            "turn replicated_tensor_sharding off."
        )


def _same_update_on_views(optimizer: Any, params: Any, plan: ShardingPlan) -> bool:
    """One probe update, whole vs the views of one domain, compared bit for bit."""
    rng = np.random.default_rng(0)
    leaves = plan.treedef.flatten_up_to(params)
    probe = [rng.standard_normal(np.shape(x)).astype(np.dtype(x.dtype)) for x in leaves]
    values = plan.treedef.unflatten([np.asarray(x) for x in leaves])
    grads = plan.treedef.unflatten(probe)
    # Jitted, as the runtime's update is: one compile for the whole tree, one for the views.
    update = jax.jit(lambda g, p: optimizer.update(g, optimizer.init(p), p)[0])
    whole = update(grads, values)
    views = [
        update(plan.local_view(grads, p), plan.local_view(values, p))
        for p in range(plan.domain_size)
    ]
    if jax.tree_util.tree_structure(views[0]) != jax.tree_util.tree_structure(whole):
        return False
    assembled = plan.assemble(views)
    return all(
        np.asarray(a).tobytes() == np.asarray(b).tobytes()
        for a, b in zip(
            jax.tree_util.tree_leaves(assembled), jax.tree_util.tree_leaves(whole), strict=True
        )
    )


# -- the sharded reduce-and-update stage ---------------------------------------------------------
class ShardedOptState(NamedTuple):
    """Under RTS, the optimiser state of each local replica: of its view, not of the full tree.

    Attributes:
        states: one optax state per local replica, in local-replica order.
    """

    states: tuple[Any, ...]


def init_sharded_state(
    optimizer: Any, plan: ShardingPlan, params: Any, replicas: Sequence[int]
) -> ShardedOptState:
    """``optimizer.init`` of each given global replica's view of ``params``."""
    return ShardedOptState(
        tuple(
            optimizer.init(jax.tree_util.tree_map(jax.numpy.asarray, plan.local_view(params, r)))
            for r in replicas
        )
    )


def sharded_state_nbytes(optimizer: Any, plan: ShardingPlan) -> int:
    """Optimiser-state bytes one replica holds under ``plan`` (from shapes only)."""
    state = jax.eval_shape(optimizer.init, plan.view_shapes())
    return sum(
        math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(state)
    )


def _spec(shape: tuple[int, ...], dtype: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))


@dataclasses.dataclass(frozen=True)
class ShardedReduceUpdate:
    """The RTS reduce-and-update stage: reduce-scatter, sharded update, all-gather.

    Drops in for the runtime's ``AllReduceUpdate`` (same call signature and
    ``collectives``); ``state.opt_state`` is a :class:`ShardedOptState`. Parameters come out
    bit-identical to the all-reduce path (see the module docstring for why this composition).

    Args:
        plan: which leaves are sharded and the domain size.
        update_fn: the runtime's ``(params, opt_state, grad_sum) -> (params, opt_state)``,
            applied to each local replica's view (it may donate its inputs, and may be an
            ``OffloadedUpdate``, whose states are then ``StreamingState``).
        replica_offset: global index of this instance's first replica.
        method: GCL method of the runtime's all-reduce (the reduce-scatter must match it).
        comm: mpi4py communicator of the instances; None is gcl's default.
        timeout: seconds before a missing peer raises ``gcl.CollectiveTimeout``.
    """

    plan: ShardingPlan
    update_fn: Any
    replica_offset: int = 0
    method: str = "auto"
    comm: Any = None
    timeout: float | None = None

    def __call__(self, state: Any, replica_sums: Sequence[Any]) -> Any:
        from popdist_emu._reduce_update import StageResult
        from popdist_emu._replica_step import TrainState

        plan, kw = self.plan, {"comm": self.comm, "timeout": self.timeout}
        sharded = [i for i, on in enumerate(plan.sharded) if on]
        whole = [i for i, on in enumerate(plan.sharded) if not on]
        # 1. One reduce-scatter of exactly what the all-reduce path reduces: same order.
        scattered = gcl.reduce_scatter(
            list(replica_sums), "add", method=self.method, group=gcl.All(), **kw
        )
        shards = [plan.treedef.flatten_up_to(grads) for grads, _ in scattered]
        loss = replica_sums[0][1]
        # Small leaves (and the loss) are gathered back whole: all_gather(rs(x)) == all_reduce.
        full = gcl.all_gather(
            [
                [s[i] for i in whole] + [loss_shard]
                for s, (_, loss_shard) in zip(shards, scattered, strict=True)
            ],
            like=[_spec(plan.shapes[i], plan.dtypes[i]) for i in whole]
            + [_spec(np.shape(loss), loss.dtype)],
            group=gcl.All(),
            **kw,
        )
        # 2. Several domains: copy the all-shards of the same position of every domain.
        if plan.num_domains > 1 and sharded:
            views = gcl.all_gather(
                [[s[i] for i in sharded] for s in shards],
                like=[_spec((plan.view_size(i),), plan.dtypes[i]) for i in sharded],
                group=gcl.Orthogonal(plan.num_domains),
                **kw,
            )
        else:
            views = [[s[i] for i in sharded] for s in shards]
        grad_views = []
        for view, gathered in zip(views, full, strict=True):
            leaves = [None] * len(plan.shapes)
            for i, x in zip(sharded, view, strict=True):
                leaves[i] = x
            for i, x in zip(whole, gathered[:-1], strict=True):
                leaves[i] = x
            grad_views.append(leaves)
        loss_sum = float(full[0][-1])
        bad = [float(not all(np.isfinite(x).all() for x in g)) for g in grad_views]
        flags = gcl.all_reduce([np.array([b]) for b in bad], "max", group=gcl.All(), **kw)
        if flags[0][0] > 0:
            return StageResult(state, loss_sum, False)
        # 3. Each local replica updates its view (fresh arrays: the update may donate them).
        new_views, new_states = [], []
        for k, (grads, opt_state) in enumerate(
            zip(grad_views, state.opt_state.states, strict=True)
        ):
            view = plan.local_view(state.params, self.replica_offset + k)
            view = jax.tree_util.tree_map(lambda x: jax.numpy.array(x, copy=True), view)
            new_view, new_state = self.update_fn(view, opt_state, plan.treedef.unflatten(grads))
            new_views.append(plan.treedef.flatten_up_to(new_view))
            new_states.append(new_state)
        # 4. All-gather the updated views within the domain into full parameters.
        out = [None] * len(plan.shapes)
        if sharded:
            gathered = gcl.all_gather(
                [[np.asarray(v[i]) for i in sharded] for v in new_views],
                like=[
                    _spec((plan.domain_size * plan.view_size(i),), plan.dtypes[i]) for i in sharded
                ],
                group=gcl.Consecutive(plan.domain_size),
                **kw,
            )[0]
            for i, x in zip(sharded, gathered, strict=True):
                out[i] = jax.device_put(plan.unview(i, x))
        for i in whole:
            out[i] = new_views[0][i]
        params = plan.treedef.unflatten(out)
        return StageResult(TrainState(params, ShardedOptState(tuple(new_states))), loss_sum, True)

    def collectives(self, accumulator: Any, num_replicas: int) -> tuple[Any, ...]:
        """The collectives one call runs, from the accumulator's shapes, for the cost model."""
        from popdist_emu._reduce_update import CollectiveRecord, tree_nbytes

        plan = self.plan
        _, loss = accumulator
        itemsize = [d.itemsize for d in plan.dtypes]
        n = [math.prod(s) for s in plan.shapes]
        r = plan.num_replicas
        shard_bytes = [shard_size(n[i], r) * itemsize[i] for i in range(len(n))]
        sharded = [i for i, on in enumerate(plan.sharded) if on]
        whole = [i for i, on in enumerate(plan.sharded) if not on]
        loss_bytes = np.dtype(loss.dtype).itemsize
        records = [
            CollectiveRecord(
                "reduce_scatter", "add", self.method, "All", tree_nbytes(accumulator), r
            ),
            CollectiveRecord(
                "all_gather",
                None,
                "auto",
                "All",
                sum(shard_bytes[i] for i in whole) + loss_bytes,
                r,
            ),
        ]
        if plan.num_domains > 1 and sharded:
            records.append(
                CollectiveRecord(
                    "all_gather",
                    None,
                    "auto",
                    f"Orthogonal({plan.num_domains})",
                    sum(shard_bytes[i] for i in sharded),
                    r,
                )
            )
        records.append(CollectiveRecord("all_reduce", "max", "auto", "All", 8, r))
        if sharded:
            records.append(
                CollectiveRecord(
                    "all_gather",
                    None,
                    "auto",
                    f"Consecutive({plan.domain_size})",
                    sum(plan.view_size(i) * itemsize[i] for i in sharded),
                    r,
                )
            )
        return tuple(records)


def sharded_stage(
    optimizer: Any,
    params: Any,
    update_fn: Any,
    *,
    num_replicas: int,
    num_instances: int,
    replica_offset: int,
    num_local_replicas: int,
    domain: Any = None,
    min_elements: int | None = None,
    offload: bool = False,
    method: str = "auto",
    comm: Any = None,
    timeout: float | None = None,
) -> tuple[ShardedReduceUpdate, ShardedOptState]:
    """Everything a runtime needs to train with RTS: the stage and the initial sharded state.

    Plans the sharding, refuses optimisers whose sharded update would differ, and initialises
    each local replica's state (in streaming memory with ``offload=True``).

    Returns:
        ``(stage, opt_state)``: use ``stage`` as the reduce-and-update stage and
        ``TrainState(params, opt_state)`` as the initial state.
    """
    from popdist_emu._offload import OffloadedUpdate, stream_out

    plan = plan_sharding(
        params,
        num_replicas=num_replicas,
        num_instances=num_instances,
        domain=domain,
        min_elements=min_elements,
    )
    check_elementwise(optimizer, params, plan)
    replicas = range(replica_offset, replica_offset + num_local_replicas)
    state = init_sharded_state(optimizer, plan, params, replicas)
    if offload:
        update_fn = OffloadedUpdate(update_fn)
        state = ShardedOptState(tuple(stream_out(s) for s in state.states))
    stage = ShardedReduceUpdate(plan, update_fn, replica_offset, method, comm, timeout)
    return stage, state
