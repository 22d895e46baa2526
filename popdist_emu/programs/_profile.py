"""The cost of one replica's training step, from XLA's analysis of the programs that run it.

A :class:`Program` is a ``jax.stages.Compiled`` with the jaxpr it came from; the runtime
compiles its micro-step and update once (:func:`compile_program`), calls those executables,
and :func:`profile_programs` reads the same executables' ``cost_analysis()`` (FLOPs, bytes
accessed, transcendentals) and ``memory_analysis()`` into a ``hardware.StepProfile``, so the
simulated step is the step that runs, functional and offline alike. Compiling works on
``jax.ShapeDtypeStruct`` shapes as well as on arrays, which is what offline mode uses. The
saved activations come from the forward pass's residuals (what the backward pass keeps),
which, unlike XLA's CPU temporary size, honour ``jax.checkpoint`` as the IPU's recomputation
does.

References:
    JAX ahead-of-time lowering (``jax.jit(f).lower(...).compile()``,
    ``Compiled.cost_analysis()``, ``Compiled.memory_analysis()``).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.extend.core as jex
import numpy as np

from hardware import DEFAULT_AVAILABLE_MEMORY_PROPORTION, CollectiveRecord, StepProfile
from popdist_emu._progress import phase
from popdist_emu._trees import tree_nbytes
from popdist_emu.programs._compile_lock import compile_lock
from popdist_emu.programs._matmuls import matmul_ops


def _cost(compiled) -> dict[str, float]:
    """XLA's cost analysis as one dict (jax 0.10 returns a dict; older ones a list of them)."""
    analysis = compiled.cost_analysis()
    parts = analysis if isinstance(analysis, list | tuple) else [analysis]
    totals = {"flops": 0.0, "bytes accessed": 0.0, "transcendentals": 0.0}
    for part in parts:
        for key in totals:
            totals[key] += float((part or {}).get(key, 0.0))
    return totals


class Program(NamedTuple):
    """One compiled program and the jaxpr it was compiled from.

    Calling it calls the ``jax.stages.Compiled`` directly, which never traces or compiles
    again: the program that runs is the program that was analysed.

    Attributes:
        compiled: the ``jax.stages.Compiled`` executable.
        jaxpr: the ``ClosedJaxpr`` it was lowered from (its operations and intermediates).
    """

    compiled: jax.stages.Compiled
    jaxpr: Any

    def __call__(self, *args: Any) -> Any:
        return self.compiled(*args)

    @property
    def out_info(self) -> Any:
        """Shapes and dtypes of the program's outputs (``jax.ShapeDtypeStruct`` leaves)."""
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), self.compiled.out_info
        )


# XLA options for a program compiled only to be analysed (offline mode; the profile's own
# stage programs), which never runs. XLA's cost and memory analyses come from the optimised
# HLO and its buffer assignment, before the backend generates machine code, so the backend's
# code optimisation is skipped: on ResNet-50's step the analyses are identical and the
# compile about a quarter shorter (``xla_backend_optimization_level`` in XLA's DebugOptions,
# https://github.com/openxla/xla/blob/main/xla/xla.proto).
ANALYSIS_ONLY_OPTIONS = {"xla_backend_optimization_level": 0}

# Programs compiled in this process, by function and argument shapes (most recent last).
_PROGRAMS: collections.OrderedDict[Any, Program] = collections.OrderedDict()
_MAX_PROGRAMS = 64


def _struct(x: Any) -> jax.ShapeDtypeStruct:
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    dtype = getattr(x, "dtype", None)
    return jax.ShapeDtypeStruct(
        np.shape(x),
        np.dtype(dtype) if dtype is not None else np.result_type(x),
        weak_type=bool(getattr(x, "weak_type", False)),
    )


def compile_program(
    fn: Callable, *args: Any, label: str | None = None, analysis_only: bool = False
) -> Program:
    """Traces, lowers and compiles ``fn`` for ``args`` (arrays or shape structs), once per
    process: a second request for the same function and argument shapes returns the same
    :class:`Program`. The compilation is a named phase (``compiling <label> ...``, then its
    seconds), shown by instance 0.

    Args:
        fn: jitted already (its ``donate_argnums`` and the like are kept) or a plain
            function, which is jitted here (pass the same jitted function to share programs).
        *args: the arguments' values or ``jax.ShapeDtypeStruct`` shapes.
        label: what the phase messages call the program; default ``fn``'s name.
        analysis_only: the program is compiled to be analysed, never run (offline mode):
            XLA skips the backend's code optimisation (:data:`ANALYSIS_ONLY_OPTIONS`), which
            changes neither analysis. Such a program still runs correctly, only slower.
    """
    structs = jax.tree.map(_struct, args)
    leaves, treedef = jax.tree.flatten(structs)
    key = (fn, treedef, tuple(leaves), analysis_only)
    program = _PROGRAMS.get(key)
    if program is None:
        jitted = fn if hasattr(fn, "trace") else jax.jit(fn)
        label = label or getattr(fn, "__name__", "a program")
        with phase(f"compiling {label}", f"compiled {label}"):
            traced = jitted.trace(*structs)
            lowered = traced.lower()
            # The instances of a job compile the same programs: one compiles, the others
            # load the result from the persistent cache.
            with compile_lock(lowered.as_text()):
                options = ANALYSIS_ONLY_OPTIONS if analysis_only else None
                program = Program(lowered.compile(compiler_options=options), traced.jaxpr)
        _PROGRAMS[key] = program
        while len(_PROGRAMS) > _MAX_PROGRAMS:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(key)
    return program


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


def _residual_bytes(loss_fn: Callable, params: Any, micro_batch: Any) -> int:
    """Bytes the forward pass saves for the backward pass (its vjp residuals), by tracing.

    The residuals are the leaves of the vjp closure; those that are the weights themselves
    are not activations and are left out.
    """

    def residuals(p, b):
        return jax.vjp(lambda q: loss_fn(q, b), p)[1]

    closed = jax.make_jaxpr(residuals)(params, micro_batch)
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


def _leading_dimension(micro_batch: Any) -> int:
    leaves = jax.tree.leaves(micro_batch)
    if not leaves or not np.shape(leaves[0]):
        raise ValueError(
            "profile: could not infer `micro_batch_size`: the first leaf of the micro-batch "
            "has no leading dimension; pass micro_batch_size=."
        )
    return int(np.shape(leaves[0])[0])


def profile_programs(
    micro_step: Program,
    update: Program | None = None,
    *,
    params: Any,
    micro_batch: Any,
    opt_state: Any = None,
    loss_fn: Callable | None = None,
    gradient_bytes: int | None = None,
    micro_batch_size: int | None = None,
    gradient_accumulation: int = 1,
    device_iterations: int = 1,
    collectives: Sequence[CollectiveRecord] = (),
    replicated_tensor_sharding: bool = False,
    offload_optimiser_state: bool = False,
    sharding_domain: int = 0,
    recomputation: bool = False,
    name: str = "model",
    available_memory_proportion: float | dict = DEFAULT_AVAILABLE_MEMORY_PROPORTION,
    partials_type: str = "float",
) -> StepProfile:
    """The ``hardware.StepProfile`` of one replica's step, from the programs that run it.

    Nothing is compiled here: the cost is XLA's ``cost_analysis()`` of the compiled
    ``micro_step`` (one micro-batch's forward, backward and accumulation) and ``update``
    (one weight update); the operation count and the largest intermediate come from the
    micro-step's jaxpr. This is how the runtime profiles the step it executes (see
    ``Trainer.profile``); a pipelined executor profiles its stages the same way, and one
    profile can be simulated over many layouts (``simulate_profile``).

    Args:
        micro_step: the compiled micro-step (``compile_program``).
        update: the compiled weight update, or None when the update is not part of the step.
        params: the weights (arrays or ``jax.ShapeDtypeStruct``): their bytes and precision.
        micro_batch: one micro-batch of one replica (arrays or shapes): the bytes the host
            streams per micro-batch.
        opt_state: the optimiser state (arrays or shapes), if any.
        loss_fn: ``loss_fn(params, micro_batch) -> scalar``; when given, the saved
            activations are measured from its vjp residuals by tracing (honouring
            ``jax.checkpoint``, as the IPU's recomputation does), otherwise XLA's temporary
            size of the micro-step stands for them (an upper bound on the CPU).
        gradient_bytes: bytes of one replica's gradient (what the accumulator holds);
            default: the bytes of ``params``.
        micro_batch_size: samples per micro-batch; default: the leading dimension of the
            first leaf of ``micro_batch``.
        gradient_accumulation: micro-batches per weight update.
        device_iterations: weight updates per step.
        collectives: the collectives of one update, as the reduce-and-update stage records
            them.
        replicated_tensor_sharding: the optimiser state is sharded over ``sharding_domain``.
        offload_optimiser_state: the optimiser state lives in Streaming Memory.
        sharding_domain: replicas of the RTS domain (0 = all).
        recomputation: whether the micro-step recomputes activations (for the OOM remedies).
        name: the model's name in reports.
        available_memory_proportion: PopLibs' availableMemoryProportion for the planner
            model of the micro-step's matmuls and convolutions: a float or ``{"IPU0": 0.6}``.
        partials_type: PopLibs' ``partialsType`` of those operations, "float" or "half".

    Returns:
        The StepProfile, pure data for ``hardware.simulate_step``.
    """
    if micro_batch_size is None:
        micro_batch_size = _leading_dimension(micro_batch)
    micro_cost = _cost(micro_step.compiled)
    ops, largest = _walk(micro_step.jaxpr.jaxpr)
    if loss_fn is not None:
        activations = _residual_bytes(loss_fn, params, micro_batch)
    else:
        activations = int(micro_step.compiled.memory_analysis().temp_size_in_bytes)
    update_cost = _cost(update.compiled) if update is not None else {}
    parameter_bytes = tree_nbytes(params)
    return StepProfile(
        grad_flops=micro_cost["flops"],
        grad_bytes_accessed=micro_cost["bytes accessed"],
        grad_transcendentals=micro_cost["transcendentals"],
        update_flops=update_cost.get("flops", 0.0),
        update_bytes_accessed=update_cost.get("bytes accessed", 0.0),
        parameter_bytes=parameter_bytes,
        optimiser_state_bytes=tree_nbytes(opt_state) if opt_state is not None else 0,
        gradient_bytes=parameter_bytes if gradient_bytes is None else int(gradient_bytes),
        activation_bytes=activations,
        # The largest operation needs its input and its output at once.
        temporary_bytes=2 * largest,
        host_bytes_per_micro_batch=tree_nbytes(micro_batch),
        num_ops=ops,
        micro_batch_size=int(micro_batch_size),
        gradient_accumulation=int(gradient_accumulation),
        device_iterations=int(device_iterations),
        precision=_precision(params),
        collectives=tuple(collectives),
        replicated_tensor_sharding=replicated_tensor_sharding,
        offload_optimiser_state=offload_optimiser_state,
        sharding_domain=sharding_domain,
        recomputation=recomputation,
        name=name,
        # Every matmul and convolution of the program that runs, for the planner model.
        matmuls=matmul_ops(micro_step.jaxpr, partials_type=partials_type),
        available_memory_proportion=available_memory_proportion,
    )


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
    offload_optimiser_state: bool = False,
    sharding_domain: int = 0,
    recomputation: bool = False,
    name: str = "model",
    available_memory_proportion: float | dict = DEFAULT_AVAILABLE_MEMORY_PROPORTION,
    partials_type: str = "float",
) -> StepProfile:
    """Compiles (never runs) a model's own step functions once and profiles them.

    For a model that is not trained by a ``Trainer`` (e.g. ``examples/resnet50.py``, whose
    step is only ever compiled): ``grad_fn`` and ``update_fn`` are compiled with
    :func:`compile_program` (``analysis_only``) and profiled with :func:`profile_programs`.

    Args:
        grad_fn: ``grad_fn(params, *batch) -> grads``, jitted or not.
        update_fn: ``update_fn(params, opt_state, grads) -> (params, opt_state)``, or None
            when the update is not part of the step.
        params: the weights, as arrays or ``jax.ShapeDtypeStruct``.
        batch: one micro-batch of one replica (inputs, labels, ...), arrays or shapes;
            its bytes are what the host streams per micro-batch.
        opt_state: the optimiser state (arrays or shapes), if any.
        loss_fn: ``loss_fn(params, *batch) -> scalar``, for the saved activations (see
            :func:`profile_programs`).
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
        offload_optimiser_state: the optimiser state lives in Streaming Memory.
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
        micro_batch_size = _leading_dimension(batch)
    what = f"{name}'s step (micro-batch {micro_batch_size})"
    micro = compile_program(
        grad_fn, params, *batch, label=f"{what}: forward and backward", analysis_only=True
    )
    grads = micro.out_info
    update = None
    if update_fn is not None:
        update = compile_program(
            update_fn,
            params,
            opt_state,
            grads,
            label=f"{name}'s step: weight update",
            analysis_only=True,
        )
    gradient_bytes = tree_nbytes(grads)
    if collectives is None:
        if replicated_tensor_sharding:
            collectives = (
                CollectiveRecord("reduce_scatter", method, group, gradient_bytes),
                CollectiveRecord("all_gather", method, group, tree_nbytes(params)),
            )
        else:
            collectives = (CollectiveRecord("all_reduce", method, group, gradient_bytes),)
    return profile_programs(
        micro,
        update,
        params=params,
        micro_batch=batch,
        opt_state=opt_state,
        loss_fn=None if loss_fn is None else (lambda p, b: loss_fn(p, *b)),
        gradient_bytes=gradient_bytes,
        micro_batch_size=micro_batch_size,
        gradient_accumulation=gradient_accumulation,
        device_iterations=device_iterations,
        collectives=collectives,
        replicated_tensor_sharding=replicated_tensor_sharding,
        offload_optimiser_state=offload_optimiser_state,
        sharding_domain=sharding_domain,
        recomputation=recomputation,
        name=name,
        available_memory_proportion=available_memory_proportion,
        partials_type=partials_type,
    )
