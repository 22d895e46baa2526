"""The replicated training runtime: a user's JAX loss and an optax optimiser on every replica.

One optimiser step: every local replica runs the compiled micro-step on each of its
``gradient_accumulation`` micro-batches (accumulating gradients and loss), then the
reduce-and-update stage combines all replicas of the job through ``gcl`` and applies the
same update everywhere. Parameters are identical on all replicas, so an instance keeps one
copy for all of its local replicas. One call of :meth:`Trainer.step` runs
``device_iterations`` such steps.

Each distinct program (the micro-step, the update) is compiled once per process by
:meth:`Trainer.compile` and the trainer calls those ``jax.stages.Compiled`` executables
directly, so what runs is what was compiled, with no second compile; :meth:`Trainer.profile`
turns the same executables' XLA cost and memory analysis into the hardware model's
``StepProfile``, functional and offline alike. ``reduce_update`` is the replaceable
reduce-and-update stage, and the one producer of the step's collective records.

References:
    PopTorch User Guide, ``trainingModel`` with replication, gradient accumulation and
    device iterations; PopART glossary, input layout
    ``[batches_per_step, accl_factor, repl_factor, micro_batch, *sample]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
import optax

from hardware import CollectiveRecord, StepProfile
from popdist_emu._environment import offline_mode
from popdist_emu._options import Options
from popdist_emu._trees import tree_nbytes
from popdist_emu.pipeline import make_pipeline
from popdist_emu.programs import Program, compile_program, profile_programs
from popdist_emu.runtime._offload import OffloadedUpdate, stream_out
from popdist_emu.runtime._reduce_update import AllReduceUpdate, ReduceUpdateStage
from popdist_emu.runtime._replica_step import (
    TrainState,
    accumulator_struct,
    check_scalar_loss,
    make_init,
    make_micro_step,
    make_update,
    shape_struct,
    zero_accumulator,
)
from popdist_emu.runtime._sharded_update import (
    ShardedReduceUpdate,
    sharded_stage,
    sharded_state_nbytes,
)
from popdist_emu.runtime._sharding import ShardingPlan, check_elementwise, plan_sharding


class NonFiniteGradientError(FloatingPointError):
    """A replica produced a NaN or Inf loss or gradient; the message names replica and step."""


class LeverInfo(NamedTuple):
    """The memory and traffic effect of RTS and optimiser offloading on one replica.

    Attributes:
        optimiser_state_bytes_per_replica: optimiser state kept on chip by the replica that
            holds the most (the whole state without RTS, about 1/k of it with RTS over a
            domain of k replicas, 0 when offloaded).
        sharding_domain_size: replicas an RTS shard spans (1 without RTS).
        offload_bytes_per_update: bytes streamed in and out of streaming memory by one
            weight update (0 without offloading).

    References:
        PopART User Guide, "Tensor locations" (RTS and ``TensorStorage.OffChip``).
    """

    optimiser_state_bytes_per_replica: int
    sharding_domain_size: int
    offload_bytes_per_update: int


class CompiledStep(NamedTuple):
    """The programs one optimiser step runs, each compiled once, and its collectives.

    Attributes:
        micro_step: one replica's micro-step ``(params, acc, micro_batch) -> (acc, finite)``;
            None for a pipeline, whose stages' programs run instead.
        update: the optimiser update ``(params, opt_state, grad_flat) -> (params, opt_state)``.
        collectives: the collectives the reduce-and-update stage runs per update.
    """

    micro_step: Program | None
    update: Program
    collectives: tuple[CollectiveRecord, ...]


def _dtype_of(x: Any) -> np.dtype:
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.result_type(x)


def _leaf_path(path: tuple) -> str:
    return jax.tree_util.keystr(path) or "<root>"


class Trainer:
    """Trains ``loss_fn`` with ``optimiser`` on this instance's replicas of the job.

    Args:
        loss_fn: pure JAX ``loss_fn(params, micro_batch) -> scalar``, e.g. the mean
            cross-entropy over the micro-batch.
        optimiser: an optax optimiser, applied identically on every replica.
        params: initial parameters (a pytree of arrays), the same on every instance; in
            offline mode a pytree of ``jax.ShapeDtypeStruct`` is enough.
        options: step shape (replicas, accumulation, device iterations, reduction).
        comm: mpi4py communicator of the instances for gcl; None is gcl's default.
        timeout: seconds a collective waits for a peer before raising.
        debug: after every step, check that all instances hold identical parameters.
        offline: compile only, run nothing (``poprun-emu --offline-mode``); None (the
            default) takes the launcher's setting, False outside the launcher.
    """

    def __init__(
        self,
        loss_fn: Callable[[Any, Any], Any],
        optimiser: optax.GradientTransformation,
        params: Any,
        options: Options | None = None,
        *,
        comm: Any = None,
        timeout: float | None = None,
        debug: bool = False,
        offline: bool | None = None,
    ) -> None:
        if hasattr(options, "to_options"):  # popdist.poptorch.Options (PopTorch's methods)
            options = options.to_options()
        self.options = Options() if options is None else options
        self.loss_fn = loss_fn
        self.optimiser = optimiser
        self.offline = offline_mode() if offline is None else bool(offline)
        self.comm = comm
        self.timeout = timeout
        self.debug = debug
        opts = self.options
        self.num_total_replicas = opts.num_total_replicas
        self.replica_offset = opts.replica_offset
        scale = (
            1.0 / (self.num_total_replicas * opts.gradient_accumulation)
            if opts.reduction == "mean"
            else None
        )
        self.grad_fn = make_micro_step(loss_fn)
        # Model parallelism over the replica's IPUs (None: the loss runs as one program).
        self.pipeline = make_pipeline(loss_fn, opts, params)
        self.update_fn = make_update(optimiser, scale)
        # Compiled programs, by argument shapes: each is compiled once and called directly.
        self._micro_steps: dict[Any, Program] = {}
        self._updates: dict[Any, Program] = {}
        self._compiled: CompiledStep | None = None
        if self.offline:
            self._params_shape = shape_struct(params)
            self.state = None
        else:
            # A private copy: the update donates (reuses) the parameter buffers.
            params = jax.tree.map(lambda x: jax.device_put(np.array(x)), params)
            self._params_shape = shape_struct(params)
        self._opt_state_shape = jax.eval_shape(optimiser.init, self._params_shape)
        self.reduce_update: ReduceUpdateStage
        self.reduce_update, opt_state = self._select_stage(params, comm, timeout)
        if not self.offline:
            self.state = TrainState(params, opt_state)
        self._micro_batch_shape: Any = None
        self._loss_shape: Any = None
        self._zeros: Any = None
        self.steps_done = 0

    # ----------------------------------------------------------------- inspection
    @property
    def params(self) -> Any:
        """The current parameters (identical on every replica of the job)."""
        if self.state is None:
            raise RuntimeError(
                "Trainer.params: offline mode holds no parameter values, only shapes; "
                "drop --offline-mode (or pass Trainer(..., offline=False)) to train."
            )
        return self.state.params

    def example_args(self, batch: Any) -> dict[str, Any]:
        """Shape structs of the compiled functions' arguments, from a call's ``batch``.

        Returns:
            ``{"micro_step": (params, acc, micro_batch), "update": (params, opt_state,
            grad_flat)}``, each a tuple of pytrees of ``jax.ShapeDtypeStruct``; ``acc`` is
            the flat accumulator (gradient elements, then the loss sum).
        """
        micro = self._prepare(batch)
        acc = accumulator_struct(self._params_shape, self._loss_shape.dtype)
        grad = jax.ShapeDtypeStruct((acc.shape[0] - 1,), acc.dtype)
        return {
            "micro_step": (self._params_shape, acc, micro),
            "update": (self._params_shape, self._opt_state_shape, grad),
        }

    def collectives(self, batch: Any) -> tuple[CollectiveRecord, ...]:
        """The collectives one optimiser step runs (the same for every step)."""
        self._prepare(batch)
        acc = accumulator_struct(self._params_shape, self._loss_shape.dtype)
        return self.reduce_update.collectives(acc)

    def compile(self, batch: Any) -> CompiledStep:
        """The step's compiled programs for ``batch``'s shapes: no data, no collective.

        Each distinct program is compiled once per process, on first sight of its argument
        shapes (trainers of the same loss, optimiser and shapes share it, functional and
        offline alike); :meth:`step` calls exactly these executables and :meth:`profile`
        analyses them.

        Args:
            batch: a call's input or its shapes (``jax.ShapeDtypeStruct`` leaves), laid out
                ``[device_iterations, gradient_accumulation, replicas, micro_batch, *sample]``.
        """
        self._prepare(batch)
        assert self._compiled is not None
        return self._compiled

    def profile(self, batch: Any, *, name: str = "model") -> StepProfile:
        """The hardware model's profile of one step: XLA's analysis of the compiled programs
        :meth:`step` runs, with the collectives the reduce-and-update stage records.

        Args:
            batch: a call's input or its shapes, as for :meth:`compile`.
            name: the model's name in reports.
        """
        step = self.compile(batch)
        micro = self._micro_batch_shape
        opts = self.options
        acc = accumulator_struct(self._params_shape, self._loss_shape.dtype)
        return profile_programs(
            step.micro_step,
            step.update,
            params=self._params_shape,
            micro_batch=micro,
            opt_state=self._opt_state_shape,
            loss_fn=self.loss_fn,
            gradient_bytes=tree_nbytes(acc) - np.dtype(acc.dtype).itemsize,
            micro_batch_size=int(np.shape(jax.tree.leaves(micro)[0])[0]),
            gradient_accumulation=opts.gradient_accumulation,
            device_iterations=opts.device_iterations,
            collectives=step.collectives,
            replicated_tensor_sharding=bool(opts.replicated_tensor_sharding),
            offload_optimiser_state=bool(opts.offload_optimiser),
            sharding_domain=self._sharding_domain(),
            name=name,
            available_memory_proportion=opts.available_memory_proportion,
            partials_type=opts.partials_type,
        )

    def _sharding_domain(self) -> int:
        """Replicas an RTS shard spans, as the trainer resolved it (0 = all replicas)."""
        if self._plan is not None:
            return int(self._plan.domain_size)
        return int(self.options.sharding_domain or 0)

    # ----------------------------------------------------------------- training
    def step(self, batch: Any) -> float | np.ndarray:
        """Runs ``device_iterations`` optimiser steps on one call's batch.

        Args:
            batch: a pytree whose leaves are laid out ``[device_iterations,
                gradient_accumulation, replication_factor, micro_batch, *sample]``
                (as :meth:`ReplicaLoader.batch` returns).

        Returns:
            The global mean loss (over all replicas and accumulated micro-batches) of the
            last step for ``output_mode="final"``, or of every step, ``[device_iterations]``,
            for ``"all"``.
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
        for d in range(opts.device_iterations):
            losses[d] = self._one_step(batch, d) / divisor
        return losses if opts.output_mode == "all" else float(losses[-1])

    def _one_step(self, batch: Any, d: int) -> float:
        sums, flags = self._accumulate(batch, d)
        result = self.reduce_update(self.state, sums)
        if not result.finite:
            self._raise_non_finite(flags)
        self.state = result.state
        self.steps_done += 1
        if self.debug:
            self.check_replicas_identical()
        return result.loss_sum

    def _accumulate(self, batch: Any, d: int) -> tuple[list[Any], list[list[Any]]]:
        """Every local replica's flat accumulator for device iteration ``d`` of ``batch``.

        Each replica runs the compiled micro-step on its ``gradient_accumulation``
        micro-batches, one call after the other.

        Returns:
            ``(sums, flags)``: one flat accumulator (gradient sum, then loss sum) per local
            replica, and per replica the finite flag of each micro-batch.
        """
        opts = self.options
        leaves, treedef = jax.tree.flatten(batch)
        sums, flags = [], []
        if self.pipeline is not None:
            # The replica's micro-batches run through the stages (pipelined or sharded) and
            # come out as the same flat accumulator, accumulated in micro-batch order.
            for k in range(opts.replication_factor):
                micros = [
                    jax.tree.unflatten(treedef, [leaf[d, a, k] for leaf in leaves])
                    for a in range(opts.gradient_accumulation)
                ]
                acc, finite = self.pipeline.accumulate(self.state.params, micros, self._zeros)
                sums.append(acc)
                flags.append([finite] * opts.gradient_accumulation)
            return sums, flags
        micro_step = self._compiled.micro_step
        for k in range(opts.replication_factor):
            acc = self._zeros
            replica_flags = []
            for a in range(opts.gradient_accumulation):
                micro = jax.tree.unflatten(treedef, [leaf[d, a, k] for leaf in leaves])
                acc, finite = micro_step(self.state.params, acc, micro)
                replica_flags.append(finite)
            sums.append(acc)
            flags.append(replica_flags)
        return sums, flags

    def _run_update(self, params: Any, opt_state: Any, grad_flat: Any) -> tuple[Any, Any]:
        """The compiled update of the current step shape; what every stage calls."""
        assert self._compiled is not None, "Trainer: the step was not compiled"
        return self._compiled.update(params, opt_state, grad_flat)

    def check_replicas_identical(self) -> None:
        """Checks, through gcl, that every instance holds the same parameters, bit for bit.

        Each instance hashes its parameter bytes; the max and min over all replicas must
        agree. Cheap (one small all-reduce pair), so ``debug=True`` runs it every step.
        """
        import zlib

        import gcl

        digest = 0
        for leaf in jax.tree.leaves(self.state.params):
            digest = zlib.crc32(np.ascontiguousarray(leaf).tobytes(), digest)
        local = [np.array([float(digest)])] * self.options.replication_factor
        kw = {"comm": self.comm, "timeout": self.timeout}
        hi = gcl.all_reduce(local, "max", **kw)[0][0]
        lo = gcl.all_reduce(local, "min", **kw)[0][0]
        if hi != lo:
            raise AssertionError(
                f"Trainer: replicas diverged after step {self.steps_done}: parameter hashes "
                f"range over [{lo:.0f}, {hi:.0f}]; every instance must start from the same "
                f"params and compute under the same CPU allowance."
            )

    # ----------------------------------------------------------------- helpers
    def _select_stage(self, params: Any, comm: Any, timeout: float | None) -> tuple[Any, Any]:
        """The reduce-and-update stage the levers ask for, and the initial optimiser state.

        RTS swaps in the sharded stage (reduce-scatter, owned-element update, all-gathers)
        with each local replica's part of the state; offloading wraps the update so the state
        lives in host memory (streaming memory) between updates. Both keep the numbers of the
        plain all-reduce path bit for bit. With RTS and offloading together the sharded parts
        already stay on the host between updates, so only the accounting changes
        (:attr:`lever_info`). Offline mode plans the same stage from shapes, with no state.

        Returns:
            ``(stage, opt_state)``; ``opt_state`` is None in offline mode.
        """
        opts, optimiser = self.options, self.optimiser
        kw = {"comm": comm, "timeout": timeout}
        replicas = opts.num_total_replicas
        self._plan: ShardingPlan | None = None
        if opts.replicated_tensor_sharding:
            layout = {
                "num_replicas": opts.num_total_replicas,
                "num_instances": opts.num_instances,
            }
            if self.offline:
                plan = plan_sharding(self._params_shape, domain=opts.sharding_domain, **layout)
                # Shapes only: the element-wise probe update needs values, so trace only.
                check_elementwise(optimiser, self._params_shape)
                stage, opt_state = (
                    ShardedReduceUpdate(plan, self._run_update, opts.replica_offset, **kw),
                    None,
                )
            else:
                stage, opt_state = sharded_stage(
                    optimiser,
                    params,
                    self._run_update,
                    replica_offset=opts.replica_offset,
                    num_local_replicas=opts.replication_factor,
                    domain=opts.sharding_domain,
                    **layout,
                    **kw,
                )
                plan = stage.plan
            self._plan = plan
            return stage, opt_state

        def init(values: Any) -> Any:
            program = compile_program(make_init(optimiser), values, label="the optimiser's init")
            return program(values)

        if opts.offload_optimiser:
            stage = AllReduceUpdate(OffloadedUpdate(self._run_update), num_replicas=replicas, **kw)
            return stage, None if self.offline else stream_out(init(params))
        stage = AllReduceUpdate(self._run_update, num_replicas=replicas, **kw)
        return stage, None if self.offline else init(params)

    @property
    def lever_info(self) -> LeverInfo:
        """What RTS and offloading buy and cost per replica, from shapes (offline too)."""
        opts = self.options
        if self._plan is not None:
            state_bytes = sharded_state_nbytes(self.optimiser, self._plan)
            domain = self._plan.domain_size
        else:
            state_bytes = tree_nbytes(self._opt_state_shape)
            domain = 1
        if opts.offload_optimiser:
            # The whole (or this replica's sharded part of the) state, in then out per update.
            return LeverInfo(0, domain, 2 * state_bytes)
        return LeverInfo(state_bytes, domain, 0)

    @property
    def optimiser_state_bytes_per_replica(self) -> int:
        """Optimiser-state bytes one replica keeps on chip (the most-loaded replica under RTS;
        0 when offloaded)."""
        return self.lever_info.optimiser_state_bytes_per_replica

    def _prepare(self, batch: Any) -> Any:
        """Checks a call's batch layout; on first sight traces the loss and sets shapes.

        Returns:
            The micro-batch shape structs.
        """
        opts = self.options
        want = (opts.device_iterations, opts.gradient_accumulation, opts.replication_factor)
        micro_batch_sizes = set()
        paths_leaves = jax.tree_util.tree_flatten_with_path(batch)[0]
        if not paths_leaves:
            raise ValueError("Trainer: `batch` has no arrays; pass e.g. (images, labels).")
        for path, leaf in paths_leaves:
            shape = tuple(np.shape(leaf))
            if len(shape) < 4 or shape[:3] != want:
                raise ValueError(
                    f"Trainer: `batch` leaf {_leaf_path(path)} has shape {shape}, but its "
                    f"leading dims must be [device_iterations={want[0]}, "
                    f"gradient_accumulation={want[1]}, replication_factor={want[2]}, "
                    f"micro_batch, *sample]; lay the batch out that way "
                    f"(ReplicaLoader.batch does) or change the Options."
                )
            micro_batch_sizes.add(shape[3])
        if len(micro_batch_sizes) != 1:
            raise ValueError(
                f"Trainer: `batch` leaves disagree on the micro-batch size (axis 3): "
                f"{sorted(micro_batch_sizes)}; every leaf needs the same number of samples."
            )
        micro = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(tuple(np.shape(x))[3:], _dtype_of(x)), batch
        )
        if micro != self._micro_batch_shape:
            self._loss_shape = check_scalar_loss(self.loss_fn, self._params_shape, micro)
            self._micro_batch_shape = micro
            self._compiled = self._compile_programs(micro)
            if self.state is not None:
                self._zeros = zero_accumulator(self.state.params, self._loss_shape.dtype)
        return micro

    def _compile_programs(self, micro: Any) -> CompiledStep:
        """Compiles the micro-step and the update for these shapes, each at most once."""
        acc = accumulator_struct(self._params_shape, self._loss_shape.dtype)
        grad = jax.ShapeDtypeStruct((acc.shape[0] - 1,), acc.dtype)
        micro_key = (jax.tree.structure(micro), tuple(jax.tree.leaves(micro)), acc)
        # A pipeline runs its stages' programs instead of the whole micro-step.
        if self.pipeline is None and micro_key not in self._micro_steps:
            self._micro_steps[micro_key] = compile_program(
                self.grad_fn,
                self._params_shape,
                acc,
                micro,
                label="the replica's micro-step",
                analysis_only=self.offline,
            )
        if grad not in self._updates:
            self._updates[grad] = compile_program(
                self.update_fn,
                self._params_shape,
                self._opt_state_shape,
                grad,
                label="the weight update",
                analysis_only=self.offline,
            )
        return CompiledStep(
            self._micro_steps.get(micro_key),
            self._updates[grad],
            self.reduce_update.collectives(acc),
        )

    def _raise_non_finite(self, flags: list[list[Any]]) -> None:
        """Finds, over all instances, the first replica and micro-batch that went non-finite."""
        import gcl

        opts = self.options
        local = []
        for k, replica_flags in enumerate(flags):
            marks = np.zeros(self.num_total_replicas)
            bad = [a for a, ok in enumerate(replica_flags) if not bool(ok)]
            if bad:
                marks[self.replica_offset + k] = bad[0] + 1
            local.append(marks)
        marks = gcl.all_reduce(local, "max", comm=self.comm, timeout=self.timeout)[0]
        culprits = np.flatnonzero(marks)
        step = self.steps_done
        if culprits.size == 0:
            raise NonFiniteGradientError(
                f"Trainer: the gradient summed over replicas at step {step} overflowed to "
                f"Inf although every replica's gradient was finite; use reduction='mean' "
                f"with a smaller loss scale or a lower learning rate."
            )
        r = int(culprits[0])
        a = int(marks[r]) - 1
        others = f" (also replicas {culprits[1:].tolist()})" if culprits.size > 1 else ""
        raise NonFiniteGradientError(
            f"Trainer: NaN or Inf loss/gradient from global replica {r} at step {step} "
            f"(micro-batch {a} of gradient_accumulation={opts.gradient_accumulation}){others}; "
            f"check that replica's input data, lower the learning rate or clip gradients."
        )
