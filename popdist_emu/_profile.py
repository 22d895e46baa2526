"""The cost of one replica's training step, from XLA's analysis of the compiled step.

The gradient and update functions are lowered and compiled, never run, so this works on
``jax.ShapeDtypeStruct`` shapes as well as on arrays and is what offline mode uses. XLA's
``cost_analysis()`` gives FLOPs, bytes accessed and transcendentals; ``memory_analysis()``
gives argument, output and temporary sizes. The saved activations come from the forward
pass's residuals (what the backward pass keeps), which, unlike XLA's CPU temporary size,
honour ``jax.checkpoint`` as the IPU's recomputation does.

References:
    JAX ahead-of-time lowering (``jax.jit(f).lower(...).compile()``,
    ``Compiled.cost_analysis()``, ``Compiled.memory_analysis()``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core as jex
import numpy as np

from hardware import CollectiveRecord, StepProfile
from popdist_emu._matmuls import matmul_ops


def _tree_bytes(tree: Any) -> int:
    return int(
        sum(math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize for leaf in jax.tree.leaves(tree))
    )


def _cost(compiled) -> dict[str, float]:
    """XLA's cost analysis as one dict (jax 0.10 returns a dict; older ones a list of them)."""
    analysis = compiled.cost_analysis()
    parts = analysis if isinstance(analysis, list | tuple) else [analysis]
    totals = {"flops": 0.0, "bytes accessed": 0.0, "transcendentals": 0.0}
    for part in parts:
        for key in totals:
            totals[key] += float((part or {}).get(key, 0.0))
    return totals


def _compile(fn: Callable, *args):
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    return jitted.lower(*args).compile()


def _walk(jaxpr) -> tuple[int, int]:
    """(primitive ops, bytes of the largest intermediate) of a jaxpr and its sub-jaxprs."""
    ops, largest = 0, 0
    for eqn in jaxpr.eqns:
        ops += 1
        for var in eqn.outvars:
            aval = var.aval
            if hasattr(aval, "shape") and hasattr(aval, "dtype"):
                nbytes = math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
                largest = max(largest, nbytes)
        for sub in jex.jaxprs_in_params(eqn.params):
            sub_ops, sub_largest = _walk(sub)
            ops += sub_ops
            largest = max(largest, sub_largest)
    return ops, largest


def _residual_bytes(loss_fn: Callable, params: Any, batch: Sequence[Any]) -> int:
    """Bytes the forward pass saves for the backward pass (its vjp residuals).

    The residuals are the leaves of the vjp closure; those that are the weights themselves
    are not activations and are left out.
    """

    def residuals(p, *b):
        return jax.vjp(lambda q: loss_fn(q, *b), p)[1]

    closed = jax.make_jaxpr(residuals)(params, *batch)
    inputs = {v for v in closed.jaxpr.invars}
    seen, total = set(), 0
    for var in closed.jaxpr.outvars:
        if not isinstance(var, jex.Var) or var in inputs or var in seen:
            continue
        seen.add(var)
        total += math.prod(var.aval.shape) * np.dtype(var.aval.dtype).itemsize
    return int(total)


def _precision(params: Any) -> str:
    """The arithmetic a model runs in: that of most of its floating-point weight bytes."""
    by_width: dict[int, int] = {}
    for leaf in jax.tree.leaves(params):
        dtype = np.dtype(leaf.dtype)
        if np.issubdtype(dtype, np.floating) or dtype.name == "bfloat16":
            by_width[dtype.itemsize] = by_width.get(dtype.itemsize, 0) + math.prod(leaf.shape)
    if not by_width:
        return "float32"
    return "float16" if max(by_width, key=lambda w: by_width[w] * w) <= 2 else "float32"


def profile_step(
    grad_fn: Callable,
    update_fn: Callable | None = None,
    *,
    params: Any,
    batch: Sequence[Any],
    opt_state: Any = None,
    loss_fn: Callable | None = None,
    micro_batch_size: int | None = None,
    gradient_accumulation: int = 1,
    device_iterations: int = 1,
    collectives: Sequence[CollectiveRecord] | None = None,
    method: str = "auto",
    group: str = "all",
    replicated_tensor_sharding: bool = False,
    offload_optimizer_state: bool = False,
    sharding_domain: int = 0,
    recomputation: bool = False,
    name: str = "model",
    available_memory_proportion: float | dict = 0.6,
    partials_type: str = "float",
) -> StepProfile:
    """Compiles (never runs) one replica's step and returns its ``hardware.StepProfile``.

    Args:
        grad_fn: ``grad_fn(params, *batch) -> grads``, jitted or not.
        update_fn: ``update_fn(params, opt_state, grads) -> (params, opt_state)``, or None
            when the update is not part of the step.
        params: the weights, as arrays or ``jax.ShapeDtypeStruct``.
        batch: one micro-batch of one replica (inputs, labels, ...), arrays or shapes;
            its bytes are what the host streams per micro-batch.
        opt_state: the optimiser state (arrays or shapes), if any.
        loss_fn: ``loss_fn(params, *batch) -> scalar``; when given, the saved activations
            are measured from its vjp residuals (honouring ``jax.checkpoint``), otherwise
            XLA's temporary size stands for them (an upper bound on the CPU).
        micro_batch_size: samples per micro-batch; default: the leading dimension of the
            first leaf of ``batch``.
        gradient_accumulation: micro-batches per weight update.
        device_iterations: weight updates per step.
        collectives: the collectives of one update; default: an all-reduce of the
            gradients, or under RTS a reduce-scatter of the gradients and an all-gather of
            the weights, with ``method`` and ``group``.
        method: GCL method of the default collectives.
        group: GCL group of the default collectives ("all", "consecutive(k)", ...).
        replicated_tensor_sharding: the optimiser state is sharded over ``sharding_domain``.
        offload_optimizer_state: the optimiser state lives in Streaming Memory.
        sharding_domain: replicas of the RTS domain (0 = all).
        recomputation: whether ``grad_fn`` recomputes activations (for the OOM remedies).
        name: the model's name in reports.
        available_memory_proportion: PopLibs' availableMemoryProportion for the planner
            model of the step's matmuls and convolutions: a float or ``{"IPU0": 0.6}``.
        partials_type: PopLibs' ``partialsType`` of those operations, "float" or "half".

    Returns:
        The StepProfile, pure data for ``hardware.simulate_step``.
    """
    batch = tuple(batch)
    if micro_batch_size is None:
        leaves = jax.tree.leaves(batch)
        if not leaves or not leaves[0].shape:
            raise ValueError(
                "profile_step could not infer `micro_batch_size`: the first leaf of `batch` "
                "has no leading dimension; pass micro_batch_size=."
            )
        micro_batch_size = int(leaves[0].shape[0])
    grad_compiled = _compile(grad_fn, params, *batch)
    grad_cost = _cost(grad_compiled)
    grad_memory = grad_compiled.memory_analysis()
    grads = jax.eval_shape(grad_fn, params, *batch)
    gradient_bytes = _tree_bytes(grads)
    grad_jaxpr = jax.make_jaxpr(grad_fn)(params, *batch)
    ops, largest = _walk(grad_jaxpr.jaxpr)
    if loss_fn is not None:
        activations = _residual_bytes(loss_fn, params, batch)
    else:
        activations = int(grad_memory.temp_size_in_bytes)

    update_cost = {"flops": 0.0, "bytes accessed": 0.0}
    if update_fn is not None:
        update_cost = _cost(_compile(update_fn, params, opt_state, grads))

    parameter_bytes = _tree_bytes(params)
    if collectives is None:
        if replicated_tensor_sharding:
            collectives = (
                CollectiveRecord("reduce_scatter", method, group, gradient_bytes),
                CollectiveRecord("all_gather", method, group, parameter_bytes),
            )
        else:
            collectives = (CollectiveRecord("all_reduce", method, group, gradient_bytes),)
    return StepProfile(
        grad_flops=grad_cost["flops"],
        grad_bytes_accessed=grad_cost["bytes accessed"],
        grad_transcendentals=grad_cost["transcendentals"],
        update_flops=update_cost["flops"],
        update_bytes_accessed=update_cost["bytes accessed"],
        parameter_bytes=parameter_bytes,
        optimizer_state_bytes=_tree_bytes(opt_state) if opt_state is not None else 0,
        gradient_bytes=gradient_bytes,
        activation_bytes=activations,
        # The largest operation needs its input and its output at once.
        temporary_bytes=2 * largest,
        host_bytes_per_micro_batch=_tree_bytes(batch),
        num_ops=ops,
        micro_batch_size=int(micro_batch_size),
        gradient_accumulation=int(gradient_accumulation),
        device_iterations=int(device_iterations),
        precision=_precision(params),
        collectives=tuple(collectives),
        replicated_tensor_sharding=replicated_tensor_sharding,
        offload_optimizer_state=offload_optimizer_state,
        sharding_domain=sharding_domain,
        recomputation=recomputation,
        name=name,
        matmuls=matmul_ops(grad_jaxpr, partials_type=partials_type),
        available_memory_proportion=available_memory_proportion,
    )
