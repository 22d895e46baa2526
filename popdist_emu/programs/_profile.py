"""The profile of one replica's step from its compiled programs, in two forms.

:func:`profile_programs` profiles programs already compiled (a ``Trainer``'s, or any
compiled with ``compile_program``); :func:`profile_step` compiles a model's own step
functions first. Both take the run's settings as one :class:`StepSettings` value, measure
the programs with :func:`program_counts` and hand the counts to the one builder,
:func:`~popdist_emu.programs.build_step_profile`.

The saved activations come from the forward pass's residuals (what the backward pass
keeps), which, unlike XLA's CPU temporary size, honour ``jax.checkpoint`` as the IPU's
recomputation does.

References:
    JAX ahead-of-time lowering (``jax.jit(f).lower(...).compile()``,
    ``Compiled.cost_analysis()``, ``Compiled.memory_analysis()``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

import gcl
from hardware import (
    CollectiveRecord,
    ReplicaLayout,
    StepProfile,
    resolve_group,
)
from popdist_emu._trees import tree_nbytes
from popdist_emu.programs._analysis import (
    XlaCost,
    jaxpr_size,
    loss_vjp,
    residual_bytes,
    xla_cost,
)
from popdist_emu.programs._compile import Program, compile_program
from popdist_emu.programs._matmuls import matmul_ops
from popdist_emu.programs._shapes import gradient_nbytes
from popdist_emu.programs._step_profile import ProgramCounts, StepSettings, build_step_profile


def program_counts(
    micro_step: Program,
    update: Program | None,
    *,
    params: Any,
    micro_batch: Any,
    loss_fn: Callable[[Any, Any], jax.Array] | None,
    partials_type: str,
) -> ProgramCounts:
    """:class:`ProgramCounts` of a replica's compiled micro-step and update.

    The operation count and the largest intermediate come from the micro-step's jaxpr; with
    ``loss_fn`` the saved activations are its vjp residuals (honouring ``jax.checkpoint``),
    otherwise XLA's temporary size of the micro-step stands for them (an upper bound on the
    CPU).
    """
    size = jaxpr_size(micro_step.jaxpr.jaxpr)
    if loss_fn is not None:
        activations = residual_bytes(functools.partial(loss_vjp, loss_fn), params, micro_batch)
    else:
        memory = micro_step.compiled.memory_analysis()
        activations = int(getattr(memory, "temp_size_in_bytes", 0))
    return ProgramCounts(
        grad=xla_cost(micro_step.compiled),
        update=xla_cost(update.compiled) if update is not None else XlaCost(),
        num_ops=size.num_ops,
        code_ops=size.code_ops,
        activation_bytes=activations,
        # The largest operation needs its input and its output at once.
        temporary_bytes=2 * size.largest_bytes,
        # Every matmul and convolution of the program that runs, for the planner model.
        matmuls=matmul_ops(
            micro_step.jaxpr, partials_type=partials_type, weights=len(jax.tree.leaves(params))
        ),
    )


def settled_collectives(
    sizes: Mapping[str, int], method: str, group: str, layout: ReplicaLayout
) -> tuple[CollectiveRecord, ...]:
    """One record per ``kind -> bytes`` of ``sizes``, each with the method gcl runs for it
    in ``group`` under ``layout`` (``auto`` settled by gcl's own rule)."""
    size = resolve_group(group, layout.num_replicas).size
    return tuple(
        CollectiveRecord(kind, gcl.collective_method(kind, nbytes, size, method), group, nbytes)
        for kind, nbytes in sizes.items()
    )


def _leading_dimension(micro_batch: Any) -> int:
    leaves = jax.tree.leaves(micro_batch)
    if not leaves or not np.shape(leaves[0]):
        raise ValueError(
            "profile: could not infer `micro_batch_size`: the first leaf of the micro-batch "
            "has no leading dimension; pass settings=StepSettings(micro_batch_size=...)."
        )
    return int(np.shape(leaves[0])[0])


def profile_programs(
    micro_step: Program,
    update: Program | None = None,
    *,
    params: Any,
    micro_batch: Any,
    settings: StepSettings,
    opt_state: Any = None,
    loss_fn: Callable[[Any, Any], jax.Array] | None = None,
    gradient_bytes: int | None = None,
) -> StepProfile:
    """The ``hardware.StepProfile`` of one replica's step, from the programs that run it.

    Nothing is compiled here: the cost is XLA's ``cost_analysis()`` of the compiled
    ``micro_step`` (one micro-batch's forward, backward and accumulation) and ``update``
    (one weight update); the operation count and the largest intermediate come from the
    micro-step's jaxpr. One profile can be simulated over many layouts
    (``simulate_profile``).

    Args:
        micro_step: the compiled micro-step (``compile_program``).
        update: the compiled weight update, or None when the update is not part of the step.
        params: the weights (arrays or ``jax.ShapeDtypeStruct``): their bytes and precision.
        micro_batch: one micro-batch of one replica (arrays or shapes): the bytes the host
            streams per micro-batch.
        settings: what the run decides (:class:`StepSettings`: micro-batch, accumulation,
            device iterations, collectives, RTS, offloading, the planner's settings).
        opt_state: the optimiser state (arrays or shapes), if any.
        loss_fn: ``loss_fn(params, micro_batch) -> scalar``; when given, the saved
            activations are measured from its vjp residuals by tracing (honouring
            ``jax.checkpoint``, as the IPU's recomputation does), otherwise XLA's temporary
            size of the micro-step stands for them (an upper bound on the CPU).
        gradient_bytes: bytes of one replica's gradient (``gradient_nbytes`` of its
            gradient); default those of ``params``' gradient.

    Returns:
        The StepProfile, pure data for ``hardware.simulate_step``.
    """
    counts = program_counts(
        micro_step,
        update,
        params=params,
        micro_batch=micro_batch,
        loss_fn=loss_fn,
        partials_type=settings.partials_type,
    )
    return build_step_profile(
        counts,
        settings,
        params=params,
        opt_state=opt_state,
        micro_batch=micro_batch,
        gradient_bytes=gradient_bytes,
    )


def profile_step(
    grad_fn: Callable[..., Any],
    update_fn: Callable[..., Any] | None = None,
    *,
    params: Any,
    batch: Sequence[Any],
    opt_state: Any = None,
    loss_fn: Callable[..., jax.Array] | None = None,
    settings: StepSettings | None = None,
    collectives: Sequence[CollectiveRecord] | None = None,
    method: str = "auto",
    group: str = "all",
    layout: ReplicaLayout | None = None,
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
        settings: what the run decides (:class:`StepSettings`); default: one update of the
            micro-batch's leading dimension. Its collectives are this function's.
        collectives: the collectives of one update; default: an all-reduce of the
            gradients, or under RTS a reduce-scatter of the gradients and an all-gather of
            the weights, with ``method`` and ``group``, each recorded with the method gcl
            runs for it under ``layout`` (``gcl.collective_method``: ``auto`` is settled
            here, never priced).
        method: GCL method of the default collectives (``auto``: gcl's choice).
        group: GCL group of the default collectives ("all", "consecutive(k)", ...).
        layout: the job's layout, whose group size settles ``auto``; None: one replica.

    Returns:
        The StepProfile, pure data for ``hardware.simulate_step``.
    """
    batch = tuple(batch)
    if settings is None:
        settings = StepSettings(micro_batch_size=_leading_dimension(batch))
    what = f"{settings.name}'s step (micro-batch {settings.micro_batch_size})"
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
            label=f"{settings.name}'s step: weight update",
            analysis_only=True,
        )
    gradient_bytes = gradient_nbytes(grads)
    if collectives is None:
        sizes = {"all_reduce": gradient_bytes}
        if settings.replicated_tensor_sharding:
            sizes = {"reduce_scatter": gradient_bytes, "all_gather": tree_nbytes(params)}
        collectives = settled_collectives(sizes, method, group, layout or ReplicaLayout())
    return profile_programs(
        micro,
        update,
        params=params,
        micro_batch=batch,
        settings=dataclasses.replace(settings, collectives=tuple(collectives)),
        opt_state=opt_state,
        loss_fn=None if loss_fn is None else (lambda p, b: loss_fn(p, *b)),
        gradient_bytes=gradient_bytes,
    )
