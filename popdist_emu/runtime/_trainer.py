"""The replicated training runtime: a user's JAX loss and an optax optimiser on every replica.

One optimiser step: every local replica runs the compiled micro-step on each of its
``gradient_accumulation`` micro-batches (accumulating gradients and loss), then the
reduce-and-update stage combines all replicas of the job through ``gcl`` and applies the
same update everywhere. Parameters are identical on all replicas, so an instance keeps one
copy for all of its local replicas. One call of :meth:`Trainer.step` runs
``device_iterations`` such steps.

The :class:`Trainer` coordinates smaller pieces, each with one job:

- ``_compiled.StepPrograms``: each distinct program (the micro-step, the micro-steps of
  several micro-batches together, the update) compiled once, by argument shapes, through
  the process's one bounded program cache, and called directly, so what runs is what was
  compiled; the trainer holds the programs of its step shape in use, and the stage holds
  the compiled update itself (``UpdateProgram``); a pipeline's stage programs go through
  the same cache, by the ``compile_program`` the trainer hands its pipeline (which holds
  the ones of its step shape in use);
- ``_stage_choice``: the reduce-and-update stage the levers pick (all-reduce, RTS,
  offloading), its initial state, its per-replica cost and its collectives for any layout;
- ``_step_loop``: the batch layout check and each replica's accumulation;
- ``_diagnostics``: non-finite reporting and the replica check across instances;
- ``popdist_emu.programs``: the profile of the compiled programs (:meth:`Trainer.profile`).

Its public surface for the simulation (:meth:`Trainer.step_shapes`,
:attr:`Trainer.sharding_plan`, :attr:`Trainer.sharding_domain`,
:meth:`Trainer.layout_collectives`) is typed, so nothing outside reads its private state.

References:
    PopTorch User Guide, ``trainingModel`` with replication, gradient accumulation and
    device iterations; PopART glossary, input layout
    ``[batches_per_step, accl_factor, repl_factor, micro_batch, *sample]``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

import gcl
import hardware
from hardware import CollectiveRecord, StepProfile
from popdist_emu._host_timeline import TIMELINE
from popdist_emu._options import Options
from popdist_emu.pipeline import make_pipeline
from popdist_emu.programs import StepSettings, StepShapes, compile_program, profile_programs
from popdist_emu.runtime._compiled import CompiledStep, StepPrograms
from popdist_emu.runtime._diagnostics import check_replicas_identical, raise_non_finite
from popdist_emu.runtime._reduce_update import ReduceUpdateStage
from popdist_emu.runtime._replica_step import (
    Accumulator,
    Optimiser,
    TrainState,
    check_scalar_loss,
    make_batched_micro_steps,
    make_micro_step,
    make_update,
    shape_struct,
    update_scale,
    zero_accumulator,
)
from popdist_emu.runtime._sharding import ShardingPlan
from popdist_emu.runtime._stage_choice import (
    LeverInfo,
    StepCollectives,
    collectives_for_layout,
    lever_info,
    select_stage,
)
from popdist_emu.runtime._step_loop import accumulate, micro_batch_shapes

if TYPE_CHECKING:  # mpi4py.MPI initialises MPI when imported: only for the checker
    from mpi4py import MPI


class Trainer:
    """Trains ``loss_fn`` with ``optimiser`` on this instance's replicas of the job.

    Args:
        loss_fn: pure JAX ``loss_fn(params, micro_batch) -> scalar``, e.g. the mean
            cross-entropy over the micro-batch.
        optimiser: an optax optimiser, applied identically on every replica.
        params: initial parameters (a pytree of arrays), the same on every instance; in
            offline mode a pytree of ``jax.ShapeDtypeStruct`` is enough.
        options: step shape (replicas, accumulation, device iterations, reduction) and the
            job's layout; None is ``Options()``.
        comm: mpi4py communicator of the instances for gcl; None is gcl's default.
        timeout: seconds a collective waits for a peer before raising.
        debug: after every step, check that all instances hold identical parameters.
        offline: compile only, run nothing (``poprun-emu --offline-mode``); None (the
            default) takes ``options.offline``, resolved once with the layout.
        has_aux: ``loss_fn`` returns ``(loss, outputs)`` (as for ``jax.value_and_grad``'s
            ``has_aux``) and :meth:`step` returns every micro-batch's outputs beside the
            losses, computed in the same forward pass as the gradient. Not with a pipeline.
    """

    def __init__(
        self,
        loss_fn: Callable[[Any, Any], Any],
        optimiser: Optimiser,
        params: Any,
        options: Options | None = None,
        *,
        comm: MPI.Comm | None = None,
        timeout: float | None = None,
        debug: bool = False,
        offline: bool | None = None,
        has_aux: bool = False,
    ) -> None:
        to_options = getattr(options, "to_options", None)
        if to_options is not None:  # popdist.poptorch.Options (PopTorch's methods)
            options = to_options()
        self.options: Options = Options() if options is None else options
        opts = self.options
        self.has_aux = bool(has_aux)
        # The scalar loss, for everything but the micro-step (the shapes, the analysis).
        self.loss_fn = _loss_only(loss_fn) if self.has_aux else loss_fn
        self.optimiser = optimiser
        self.offline = opts.offline if offline is None else bool(offline)
        self.comm, self.timeout, self.debug = comm, timeout, debug
        self.num_total_replicas = opts.num_total_replicas
        self.replica_offset = opts.replica_offset
        scale = update_scale(self.num_total_replicas, opts.gradient_accumulation, opts.reduction)
        self.grad_fn = make_micro_step(loss_fn, self.has_aux)
        if self.has_aux and opts.execution_strategy is not None:
            raise ValueError(
                "Trainer: has_aux=True returns outputs from the micro-step, which a pipeline "
                "does not run; compute the outputs outside the trainer for a pipelined model."
            )
        # Model parallelism over the replica's IPUs (None: the loss runs as one program). Its
        # stages' programs are compiled as the step's are (once, kept in the one cache).
        self.pipeline = make_pipeline(
            self.loss_fn,
            opts,
            params,
            compile=functools.partial(compile_program, analysis_only=self.offline),
        )
        self.update_fn = make_update(optimiser, scale)
        self.programs = StepPrograms(
            self.grad_fn,
            self.update_fn,
            make_batched_micro_steps(loss_fn, self.has_aux),
            gradient_accumulation=opts.gradient_accumulation,
            with_micro_step=self.pipeline is None,
            analysis_only=self.offline,
        )
        if not self.offline:
            # A private copy: the update donates (reuses) the parameter buffers.
            params = jax.tree.map(lambda x: jax.device_put(np.array(x)), params)
        self._params_shape = shape_struct(params)
        self._opt_state_shape = jax.eval_shape(optimiser.init, self._params_shape)
        choice = select_stage(
            optimiser,
            opts,
            self.programs.update,
            params=self._params_shape if self.offline else params,
            offline=self.offline,
            comm=comm,
            timeout=timeout,
            scale=scale,
        )
        self.reduce_update: ReduceUpdateStage = choice.stage
        self._plan = choice.plan
        self.state: TrainState | None = (
            None if self.offline else TrainState(params, choice.opt_state)
        )
        self._shapes: StepShapes | None = None
        self._compiled: CompiledStep | None = None
        self._zeros: Accumulator | None = None
        self.steps_done = 0

    # ----------------------------------------------------------------- inspection
    @property
    def params(self) -> Any:
        """The current parameters (identical on every replica of the job)."""
        return self._live_state("Trainer.params").params

    def step_shapes(self, batch: Any, *, compile: bool = True) -> StepShapes:
        """The shapes of one replica's step for a call's ``batch`` (or its shapes): weights,
        optimiser state, micro-batch and loss; the accumulator and gradient follow. Without
        ``compile`` only the loss is traced (a bound checked before a compile that, for a
        micro-batch of millions, takes minutes)."""
        if not compile:
            micro = micro_batch_shapes(batch, self.options)
            loss = check_scalar_loss(self.loss_fn, self._params_shape, micro)
            return StepShapes(self._params_shape, self._opt_state_shape, micro, loss)
        return self._prepare(batch)

    @property
    def sharding_plan(self) -> ShardingPlan | None:
        """The RTS plan of the optimiser state (who owns which elements); None without RTS."""
        return self._plan

    @property
    def sharding_domain(self) -> int:
        """Replicas an RTS shard spans, as the trainer resolved it; 0 without RTS."""
        return 0 if self._plan is None else int(self._plan.domain_size)

    def layout_collectives(self, batch: Any, layout: hardware.ReplicaLayout) -> StepCollectives:
        """The collectives one update of this step would run under another ``layout``, and
        the RTS domain they imply: what a scaling sweep prices at each of its points.

        Raises:
            ShardingError: a layout the sharding plan refuses.
        """
        shapes = self._prepare(batch)
        return collectives_for_layout(self.reduce_update, self.options, shapes, layout)

    def example_args(self, batch: Any) -> dict[str, Any]:
        """Shape structs of the compiled functions' arguments, from a call's ``batch``.

        Returns:
            ``{"micro_step": (params, acc, micro_batch), "update": (params, opt_state,
            grad_flat)}``, each a tuple of pytrees of ``jax.ShapeDtypeStruct``; ``acc`` is
            the flat accumulator (gradient elements, then the loss sum).
        """
        shapes = self._prepare(batch)
        return {
            "micro_step": (shapes.params, shapes.accumulator, shapes.micro_batch),
            "update": (shapes.params, shapes.opt_state, shapes.gradient),
        }

    def collectives(self, batch: Any) -> tuple[CollectiveRecord, ...]:
        """The collectives one optimiser step runs (the same for every step)."""
        return self.reduce_update.collectives(self._prepare(batch).accumulator)

    def compile(self, batch: Any) -> CompiledStep:
        """The step's compiled programs for ``batch``'s shapes: no data, no collective.

        Each distinct program is compiled once per process, on first sight of its argument
        shapes, and kept for reuse in the process's one bounded program cache (trainers of
        the same loss, optimiser and shapes share it, functional and offline alike); the
        trainer holds the programs of the shapes in use, so :meth:`step` calls exactly these
        executables and :meth:`profile` analyses them, whatever the cache evicts. A pipeline's
        stage programs are compiled the same way by its first step or profile
        (``Pipeline.compile``), not here: the weights-only memory check comes first.

        Args:
            batch: a call's input or its shapes (``jax.ShapeDtypeStruct`` leaves), laid out
                ``[device_iterations, gradient_accumulation, replicas, micro_batch, *sample]``.
        """
        self._prepare(batch)
        return self._compiled_step()

    def profile(self, batch: Any, *, name: str = "model") -> StepProfile:
        """The hardware model's profile of one step: XLA's analysis of the compiled programs
        :meth:`step` runs, with the collectives the reduce-and-update stage records.

        Args:
            batch: a call's input or its shapes, as for :meth:`compile`.
            name: the model's name in reports.

        Raises:
            ValueError: a pipelined trainer, whose stages are profiled one by one
                (``popdist_emu.profile_replica`` does that).
        """
        step = self.compile(batch)
        if step.micro_step is None:
            raise ValueError(
                "Trainer.profile: a pipelined trainer runs its stages' programs, not one "
                "micro-step; call popdist_emu.profile_replica(trainer, batch), which profiles "
                "each stage."
            )
        shapes = self.step_shapes(batch)
        settings = StepSettings.from_options(
            self.options,
            micro_batch_size=shapes.micro_batch_size,
            collectives=step.collectives,
            sharding_domain=self.sharding_domain,
            # Recomputation is a pipeline's stash; a data-parallel step's activations are
            # measured from its own residuals (``jax.checkpoint`` included).
            recomputation=False,
            name=name,
        )
        return profile_programs(
            step.micro_step,
            step.update,
            params=shapes.params,
            micro_batch=shapes.micro_batch,
            settings=settings,
            opt_state=shapes.opt_state,
            loss_fn=self.loss_fn,
            gradient_bytes=shapes.gradient_bytes,
        )

    @property
    def lever_info(self) -> LeverInfo:
        """What RTS and offloading buy and cost per replica, from shapes (offline too)."""
        return lever_info(self.optimiser, self.options, self._plan, self._opt_state_shape)

    @property
    def optimiser_state_bytes_per_replica(self) -> int:
        """Optimiser-state bytes one replica keeps on chip (the most-loaded replica under RTS;
        0 when offloaded)."""
        return self.lever_info.optimiser_state_bytes_per_replica

    # ----------------------------------------------------------------- training
    def step(
        self, batch: Any, *, each_iteration: Callable[[int, Any], None] | None = None
    ) -> float | np.ndarray | tuple[float | np.ndarray, Any]:
        """Runs ``device_iterations`` optimiser steps on one call's batch.

        Args:
            batch: a pytree whose leaves are laid out ``[device_iterations,
                gradient_accumulation, replication_factor, micro_batch, *sample]``
                (as :meth:`ReplicaLoader.batch` returns).
            each_iteration: called as ``each_iteration(d, params)`` at the start of device
                iteration ``d`` with the parameters it trains from, before its update:
                what a model's forward records besides its loss (BatchNorm's running
                statistics) is computed there from the same weights.

        Returns:
            The global mean loss (over all replicas and accumulated micro-batches) of the
            last step for ``output_mode="final"``, or of every step, ``[device_iterations]``,
            for ``"all"``; with ``has_aux``, ``(loss, outputs)``, the outputs of this
            instance's micro-batches with leaves ``[device_iterations,
            gradient_accumulation, replication_factor, ...]``, as the batch is laid out.
        """
        if self.offline:
            raise RuntimeError(
                "Trainer.step: offline mode (--offline-mode) compiles without running; call "
                "Trainer.compile(batch_shapes) instead, or run without --offline-mode."
            )
        self._prepare(batch)
        opts = self.options
        divisor = self.num_total_replicas * opts.gradient_accumulation
        losses = np.empty(opts.device_iterations)
        outputs = []
        for d in range(opts.device_iterations):
            if each_iteration is not None:
                each_iteration(d, self._live_state("Trainer.step").params)
            loss_sum, out = self._one_step(batch, d)
            losses[d] = loss_sum / divisor
            outputs.append(out)
        loss = losses if opts.output_mode == "all" else float(losses[-1])
        if not self.has_aux:
            return loss
        return loss, jax.tree.map(lambda *its: np.stack(its), *outputs)

    def _one_step(self, batch: Any, d: int) -> tuple[float, Any]:
        state = self._live_state("Trainer.step")
        if self._zeros is None:
            raise RuntimeError("Trainer.step: the step was not prepared for this batch.")
        compiled = self._compiled_step()
        with TIMELINE.span("micro-steps", step=self.steps_done + 1):
            sums, flags, outputs = accumulate(
                batch,
                d,
                params=state.params,
                options=self.options,
                micro_step=compiled.micro_step,
                pipeline=self.pipeline,
                zeros=self._zeros,
                batched=compiled.batched,
                with_outputs=self.has_aux,
            )
        # The collectives as gcl ran them, for the host timeline of the run.
        with gcl.timed_recording() as ran, TIMELINE.span("reduce and update"):
            result = self.reduce_update(state, sums)
        for record, started, finished in ran:
            TIMELINE.add(
                record.kind,
                started,
                finished,
                method=record.method,
                group=record.group,
                bytes=record.bytes,
            )
        if not result.finite:
            raise_non_finite(
                flags,
                options=self.options,
                step=self.steps_done,
                comm=self.comm,
                timeout=self.timeout,
            )
        self.state = result.state
        self.steps_done += 1
        if self.debug:
            self.check_replicas_identical()
        return result.loss_sum, outputs

    def check_replicas_identical(self) -> None:
        """Checks, through gcl, that every instance holds the same parameters, bit for bit.

        Each instance hashes its parameter bytes; the max and min over all replicas must
        agree. Cheap (one small all-reduce pair), so ``debug=True`` runs it every step.
        """
        check_replicas_identical(
            self._live_state("Trainer.check_replicas_identical").params,
            num_local_replicas=self.options.replication_factor,
            step=self.steps_done,
            comm=self.comm,
            timeout=self.timeout,
        )

    # ----------------------------------------------------------------- helpers
    def _live_state(self, where: str) -> TrainState:
        if self.state is None:
            raise RuntimeError(
                f"{where}: offline mode holds no parameter values, only shapes; "
                f"drop --offline-mode (or pass Trainer(..., offline=False)) to train."
            )
        return self.state

    def _compiled_step(self) -> CompiledStep:
        if self._compiled is None:
            raise RuntimeError("Trainer: the step was not compiled; call Trainer.compile(batch).")
        return self._compiled

    def _prepare(self, batch: Any) -> StepShapes:
        """Checks a call's batch layout; on first sight of its shapes traces the loss and
        compiles the step's programs (each at most once)."""
        micro = micro_batch_shapes(batch, self.options)
        if self._shapes is None or micro != self._shapes.micro_batch:
            shapes = self.step_shapes(batch, compile=False)
            programs = self.programs.compile(shapes)
            collectives = self.reduce_update.collectives(shapes.accumulator)
            self._compiled = CompiledStep(
                programs.micro_step, programs.update, collectives, programs.batched
            )
            if self.state is not None:
                self._zeros = zero_accumulator(self.state.params, shapes.loss.dtype)
            self._shapes = shapes
        return self._shapes


def _loss_only(
    loss_fn: Callable[[Any, Any], tuple[jax.Array, Any]],
) -> Callable[[Any, Any], jax.Array]:
    """``loss_fn`` of ``(loss, outputs)`` as a function of the loss alone."""

    def loss(params: Any, micro_batch: Any) -> jax.Array:
        return loss_fn(params, micro_batch)[0]

    return loss
