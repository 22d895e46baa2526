"""The compiled pieces of one replicated step: a replica's micro-step and the update.

A replica's micro-step is one jitted function of ``(params, accumulator, micro_batch)`` that
runs ``value_and_grad`` of the user's loss and adds the gradient and the loss into a flat
accumulator vector, so gradient accumulation costs no extra dispatch. Every local replica calls the
same compiled function on its own micro-batch, one call after the other: ``vmap`` over
replicas was measured to change the last bits of the gradients, and a per-replica call
keeps a replica's arithmetic independent of how many replicas share its instance.

Measured on the example network (1 CPU): ``vmap`` over 4 or 16 replicas gave other
bits than per-replica calls; one jit holding the replicas' calls unrolled gave the same bits
but was no faster (4 x micro-batch 8: 2.36 ms vs 2.42 ms for the loop; 16 x 8: slower), so
the Python loop over one compiled function stays: its dispatch cost is negligible next to
the compute. 16 calls of micro-batch 32 cost about 1.1-1.2x one call on all 512 samples.

References:
    PopTorch User Guide, gradient accumulation and
    ``accumulationAndReplicationReductionType`` (Mean divides the sum over accumulation
    and replicas once, after the reduction, as MeanReductionStrategy.Post).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpy.typing import DTypeLike

from popdist_emu.programs import accumulator_struct, compile_program

if TYPE_CHECKING:  # the stages' forms of the state, which import this module
    from popdist_emu.runtime._offload import StreamingState
    from popdist_emu.runtime._sharded_update import ShardedOptState

Params = Any
Batch = Any
# The most jitted step functions each factory below (and ``layerwise_update``) keeps. They are
# the programs' keys, not a program store: the same function object is what makes trainers of
# the same loss (or optimiser) find one compiled program in the process's ``ProgramCache``,
# and the runtime compiles them only through ``compile_program``, which then drops their
# entries in JAX's own caches, so a kept function holds no program, only its closure (the
# user's loss or optimiser). Bounded so that a process building trainers of many losses does
# not keep every loss alive; 16 is more losses and optimisers than a job or a sweep trains at
# once (one evicted while trainers of it live only costs the next such trainer a compile
# instead of a shared program), and 16 step functions of up to four programs each is the
# ``ProgramCache``'s bound, ``MAX_PROGRAMS`` = 64.
JITTED_FUNCTIONS = 16

# What a replica contributes to the reduction: a flat vector of its gradient sum over the
# accumulated micro-batches (leaves in tree order), followed by its loss sum.
Accumulator = jax.Array
# The weight update every reduce-and-update stage calls:
# ``update(params, opt_state, grad_flat) -> (params, opt_state)``.
UpdateFn = Callable[[Params, Any, jax.Array | np.ndarray], tuple[Params, Any]]


class Optimiser(Protocol):
    """What the runtime takes as an optimiser: an optax ``GradientTransformation`` or
    anything with its ``init`` and ``update`` (``popdist_emu.lamb``, ``lars``: a chain whose
    parts replicated tensor sharding reads)."""

    @property
    def init(self) -> optax.TransformInitFn: ...

    @property
    def update(self) -> optax.TransformUpdateFn: ...

    def __hash__(self) -> int: ...  # a key of the compiled programs (``make_update``)


class TrainState(NamedTuple):
    """What every replica holds between steps: identical on all replicas.

    Attributes:
        params: the weights.
        opt_state: the optimiser's state in the reduce-and-update stage's form: optax's own,
            sharded under RTS (``ShardedOptState``) or streamed out (``StreamingState``).
    """

    params: Params
    opt_state: optax.OptState | ShardedOptState | StreamingState


class NonScalarLossError(ValueError):
    """The user's loss function returned something other than a real scalar."""


def check_scalar_loss(
    loss_fn: Callable, params: Params, micro_batch: Batch
) -> jax.ShapeDtypeStruct:
    """Traces ``loss_fn`` on shapes only and checks it returns a real scalar.

    Returns:
        The loss's shape and dtype (the accumulator's loss dtype).
    """
    out = jax.eval_shape(loss_fn, params, micro_batch)
    shape = getattr(out, "shape", None)
    dtype = getattr(out, "dtype", None)
    if shape != () or dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise NonScalarLossError(
            f"Trainer: `loss_fn(params, micro_batch)` must return a real scalar (shape ()), "
            f"got {out}; reduce the per-sample losses, e.g. with jnp.mean."
        )
    return out


def zero_accumulator(params: Params, loss_dtype: DTypeLike) -> jax.Array:
    """The accumulator a replica starts each step from (shared: it is never written).

    Made on the host and copied to the device, so it costs no compilation.
    """
    struct = accumulator_struct(params, loss_dtype)
    return jax.device_put(np.zeros(struct.shape, struct.dtype))


@functools.lru_cache(maxsize=JITTED_FUNCTIONS)
def make_micro_step(loss_fn: Callable, has_aux: bool = False) -> jax.stages.Wrapped:
    """The jitted micro-step ``(params, acc, micro_batch) -> (acc', finite)``, or
    ``(acc', finite, outputs)`` where ``has_aux``: ``loss_fn`` then returns ``(loss,
    outputs)``, as for ``jax.value_and_grad(..., has_aux=True)``, and the outputs come from
    the same forward pass as the gradient (what a PopTorch model returns to the host).

    The accumulator is ONE flat vector, every gradient element (leaves in tree order) then
    the loss, so the replicas' contributions travel through gcl as a single contiguous
    array: on this machine an all-reduce of one 115 kB array over 4 instances took 1.2 ms
    against 11 ms for the same bytes as a 9-leaf tree. Flattening inside the compiled
    function is free; it only concatenates. Cached per loss function as the key that makes
    trainers of the same loss share one compiled program (:data:`JITTED_FUNCTIONS`: a key,
    not a program store).

    ``finite`` is False when this micro-batch's loss or gradient holds a NaN or an Inf; it is
    only read when the reduced gradient is not finite, to name the replica it came from.
    """
    flat_gradient = _flat_gradient_of(loss_fn, has_aux)

    def micro_step(
        params: Params, acc: jax.Array, micro_batch: Batch
    ) -> tuple[jax.Array, jax.Array] | tuple[jax.Array, jax.Array, Any]:
        # The accumulator and the finite flag(s), then with ``has_aux`` the outputs.
        flat, outputs = flat_gradient(params, micro_batch, acc.dtype)
        finite = jnp.all(jnp.isfinite(flat))
        return (acc + flat, finite, outputs) if has_aux else (acc + flat, finite)

    return jax.jit(micro_step)


def _flat_gradient_of(loss_fn: Callable, has_aux: bool = False) -> Callable:
    """``(params, micro_batch, dtype) -> (flat, outputs)``: one micro-batch's gradient, every
    leaf in tree order, then its loss, as one vector, and the loss function's outputs (None
    without ``has_aux``)."""
    value_and_grad = jax.value_and_grad(loss_fn, has_aux=has_aux)

    def flat_gradient(
        params: Params, micro_batch: Batch, dtype: DTypeLike
    ) -> tuple[jax.Array, Any]:
        value, grads = value_and_grad(params, micro_batch)
        loss, outputs = value if has_aux else (value, None)
        parts = [leaf.ravel().astype(dtype) for leaf in jax.tree.leaves(grads)]
        return jnp.concatenate([*parts, loss.reshape(1).astype(dtype)]), outputs

    return flat_gradient


# The most bytes of per-micro-batch gradients a batched accumulation holds at once.
BATCHED_GRADIENT_BYTES = 64 * 2**20


def micro_batches_per_program(accumulation: int, accumulator_bytes: int) -> int:
    """How many of a replica's ``accumulation`` micro-batches one program computes together:
    the largest divisor of ``accumulation`` whose gradients (``accumulator_bytes`` each)
    stay within :data:`BATCHED_GRADIENT_BYTES`; 1 runs the micro-step once per micro-batch."""
    fits = max(BATCHED_GRADIENT_BYTES // max(accumulator_bytes, 1), 1)
    return max(c for c in range(1, accumulation + 1) if accumulation % c == 0 and c <= fits)


@functools.lru_cache(maxsize=JITTED_FUNCTIONS)
def make_batched_micro_steps(loss_fn: Callable, has_aux: bool = False) -> jax.stages.Wrapped:
    """The jitted ``(params, acc, micro_batches) -> (acc', finite[c])`` (with ``has_aux``,
    also the ``c`` micro-batches' outputs, stacked) for ``c`` micro-batches stacked on a
    leading axis: their gradients computed together
    (``jax.vmap``: the micro-batches' samples go through each operation as one batch, as a
    framework runs a batch) and added to ``acc`` one after the other, in micro-batch order.

    Each micro-batch keeps its own loss and gradient, so PopTorch's semantics are kept
    (a loss normalised per micro-batch, statistics per micro-batch); the batched operations
    may round differently from one micro-batch at a time, within float rounding. One
    dispatch per ``c`` micro-batches instead of one each: for a small model most of a
    step's host time. Cached per loss function, as :func:`make_micro_step` (a key).
    """
    flat_gradient = _flat_gradient_of(loss_fn, has_aux)

    def micro_steps(
        params: Params, acc: jax.Array, micro_batches: Batch
    ) -> tuple[jax.Array, jax.Array] | tuple[jax.Array, jax.Array, Any]:
        # The accumulator and the finite flag(s), then with ``has_aux`` the outputs.
        flats, outputs = jax.vmap(lambda m: flat_gradient(params, m, acc.dtype))(micro_batches)
        for a in range(flats.shape[0]):  # in micro-batch order, as the micro-step adds
            acc = acc + flats[a]
        finite = jnp.all(jnp.isfinite(flats), axis=1)
        return (acc, finite, outputs) if has_aux else (acc, finite)

    return jax.jit(micro_steps)


def unflatten_like(params: Params, flat: jax.Array) -> Params:
    """Splits a flat gradient vector back into a tree shaped (and typed) like ``params``."""
    leaves, treedef = jax.tree.flatten(params)
    out, offset = [], 0
    for leaf in leaves:
        n = int(np.prod(leaf.shape, dtype=np.int64))
        out.append(flat[offset : offset + n].reshape(leaf.shape).astype(leaf.dtype))
        offset += n
    return jax.tree.unflatten(treedef, out)


def update_scale(num_replicas: int, gradient_accumulation: int, reduction: str) -> float | None:
    """What the update multiplies the reduced gradient sum by: ``1 / (replicas x
    accumulation)`` for the mean reduction (PopTorch's ``Mean``, after the reduction), None
    for the sum."""
    return 1.0 / (num_replicas * gradient_accumulation) if reduction == "mean" else None


@functools.lru_cache(maxsize=JITTED_FUNCTIONS)
def make_update(optimiser: Optimiser, scale: float | None) -> jax.stages.Wrapped:
    """The jitted update ``(params, opt_state, grad_flat) -> (params', opt_state')``.

    ``grad_flat`` is the reduced flat gradient sum (the accumulator without its loss).
    Cached per optimiser and scale as the key that makes trainers of the same optimiser
    share one compiled program (:data:`JITTED_FUNCTIONS`: a key, not a program store).

    Args:
        optimiser: the optax optimiser every replica applies.
        scale: multiplies the reduced gradient sum first (``1 / (replicas * accumulation)``
            for the mean reduction); None for the sum reduction.
    """

    def update(
        params: Params, opt_state: optax.OptState, grad_flat: jax.Array
    ) -> tuple[Params, optax.OptState]:
        if scale is not None:
            grad_flat = grad_flat * scale
        grads = unflatten_like(params, grad_flat)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    # The old params and optimiser state are dead after the update: reuse their buffers.
    return jax.jit(update, donate_argnums=(0, 1))


@functools.lru_cache(maxsize=JITTED_FUNCTIONS)
def make_init(optimiser: Optimiser) -> jax.stages.Wrapped:
    """``optimiser.init`` as one jitted program: one compile instead of one per leaf op.

    Cached per optimiser, as :func:`make_update` (a key, not a program store).
    """
    return jax.jit(optimiser.init)


def init_state(optimiser: Optimiser, params: Params) -> optax.OptState:
    """``optimiser.init(params)``, run by the compiled :func:`make_init` (compiled once per
    process while the program cache keeps it)."""
    program = compile_program(make_init(optimiser), params, label="the optimiser's init")
    return program(params)


def shape_struct(tree: Any) -> Any:
    """The tree's leaves as ``jax.ShapeDtypeStruct`` (arrays or structs accepted)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), tree)
