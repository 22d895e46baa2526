"""``poptorch.trainingModel`` and ``inferenceModel``: a torch module run on the JAX core.

The module is turned into a pure JAX function of its weights with torchax
(``torchax.extract_jax``); training runs through :class:`popdist_emu.Trainer` (this
instance's replicas, gradient accumulation, device iterations, gcl all-reduce), so the
numbers are the emulator's and do not depend on the instance layout.

Decisions (PopTorch documents the behaviour, not every detail of its host side):

- the combined batch's first dimension is ``device_iterations x gradient_accumulation x
  local replicas x micro-batch``, split in that order (outermost first);
- the loss is the output ``identity_loss`` returned wherever it sits (``_loss_output``),
  else the forward's only output, else its last (the tutorial's ``return output, loss``);
- a call returns this instance's replicas' outputs, the loss included, micro-batch by
  micro-batch, laid out as PopART's anchors for the output mode (All, Final, EveryN, Sum,
  Default; see ``_outputs``): never a mean over replicas or instances. Each micro-batch's
  outputs come from its own forward with its device iteration's weights: inside the step
  (the Trainer's ``has_aux``), or, for blocks on several IPUs (the step runs their stages)
  and a forward that changes buffers, from the module's forward as one program beside the
  step (the same numbers within float rounding; for blocks only the returned micro-batches
  run). Inference runs micro-batch by micro-batch too, each keyed by its first sample's
  index in the call; EveryN's period must divide the device iterations; Sum keeps dtypes;
- random operations (dropout) draw from a key per micro-batch: the options' ``randomSeed``
  (else ``torch.initial_seed()``) folded with the global index of the micro-batch's first
  sample, which reaches the step as one more input (4 bytes a sample over the simulated
  host link), so masks do not depend on the instance layout (see ``_random``);
- the torch module's parameters and changed buffers get the trained values when the host
  reads them, not after every call, as PopTorch copies them (see ``_host_weights``);
- buffers the forward changes (BatchNorm's running statistics) change as in PopTorch: each
  replica's, micro-batch after micro-batch, from the weights of the device iteration; the
  host sees the first local replica's (see ``_buffers``: with several replicas PopTorch
  asks for ``broadcastBuffers(False)`` but for BatchNorm's; none may feed the loss); an
  inference model keeps the buffers it changes until ``copyWeightsToHost``;
- each call runs the module in its model's mode (``train`` for a training model, ``eval``
  for an inference model) and leaves the module's mode as it found it;
- every distinct training program (each batch shape's first call) is simulated on the
  job's IPU system and reported; under ``poprun-emu --offline-mode`` the call then ends
  the program (see ``_simulated``).

References:
    PopTorch User Guide, "Model wrapping functions" (``trainingModel``, ``inferenceModel``,
    ``setOptimizer``, ``copyWeightsToHost``, ``detachFromDevice``, ``compile``), "Efficient
    data batching" (combined batch size) and "Options" (``outputMode``: Final is the default
    in training, All in inference); torchax documentation (``torchax.extract_jax``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np
import numpy.typing as npt
import torch
from jax.typing import ArrayLike

import popdist_emu
from popdist_emu.popdist import PopTorchOptions
from popdist_emu.poptorch import _host_weights as on_host
from popdist_emu.poptorch import optim
from popdist_emu.poptorch._anchors import Anchors
from popdist_emu.poptorch._arrays import (
    HostBatch,
    LaidOutBatch,
    MicroBatch,
    Weights,
    combined_layout,
    to_jax_array,
    to_torch,
)
from popdist_emu.poptorch._blocks import check_strategy
from popdist_emu.poptorch._buffers import (
    ReplicaBuffers,
    buffers_read_by,
    changed_buffers,
    check_changing_buffers,
    check_inference_buffers,
    check_modules,
    in_mode,
    module_function,
    module_tensors,
    replica_local_buffers,
    write_buffers,
)
from popdist_emu.poptorch._call_args import forward_args
from popdist_emu.poptorch._device import DeviceCalls
from popdist_emu.poptorch._learning_rate import changed_learning_rates, set_learning_rates
from popdist_emu.poptorch._loss_output import pick_loss
from popdist_emu.poptorch._optstate import HostOptimiserState
from popdist_emu.poptorch._outputs import (
    IterationOutputs,
    OutputMode,
    from_records,
    from_step,
    micro_batch_forwards,
    resolve_mode,
    returned_micro_batches,
)
from popdist_emu.poptorch._random import draws_random, holding_key, micro_batch_key, sample_indices
from popdist_emu.poptorch._recompute import recomputed
from popdist_emu.poptorch._simulated import SimulatedPrograms, simulate_step
from popdist_emu.poptorch._stages import placed_blocks
from popdist_emu.poptorch._synthetic import synthetic_inputs


class PoplarExecutor(DeviceCalls):
    """What ``trainingModel``/``inferenceModel`` return: call it with the combined batch; it
    stands in for the module (its attributes) and has PopTorch's device calls (``_device``).

    Args:
        model: the ``torch.nn.Module``; its forward returns the loss (training) or outputs.
        options: ``poptorch.Options`` (None: PopTorch's defaults for one replica).
        optimizer: ``torch.optim``/``poptorch.optim`` SGD, Adam, AdamW, RMSprop, LAMB (None:
            PopTorch's SGD, learning rate 0.01); its ``state_dict()`` both ways (``_optstate``).
        training: train (True) or only run the forward (False).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        options: PopTorchOptions | None,
        optimizer: torch.optim.Optimizer | None,
        training: bool,
    ) -> None:
        self._user_model = model
        self.options = options if options is not None else PopTorchOptions()
        self.training = training
        self._optimizer: Any = optimizer  # PopTorch's default: SGD, learning rate 0.01
        if optimizer is None and training:
            self._optimizer = optim.SGD(model.parameters(), lr=0.01)
        self._mode_fields = self.options.to_options()
        fields = self._mode_fields
        self._output: OutputMode = resolve_mode(
            getattr(self.options, "poptorch_output_mode", None),
            getattr(self.options, "output_return_period", 1),
            training=training,
            iterations=fields.device_iterations,
        )
        check_strategy(self._mode_fields.execution_strategy)  # before any compile
        self._strategy: popdist_emu.PipelinedExecution | popdist_emu.ShardedExecution | None = None
        model.train(training)
        check_modules(model)
        weights, self._fn_state, self._buffer_names = module_function(model)
        self._changing: list[str] | None = None  # buffers the forward changes, found once
        self._replicas: ReplicaBuffers | None = None  # what training changes, per replica
        self._device_buffers: Weights = {}  # what inference changed, not yet copied
        trainable = {name for name, p in model.named_parameters() if p.requires_grad}
        self._names = [name for name in weights if name in trainable]
        self._constants = {k: v for k, v in weights.items() if k not in trainable}
        anchored = getattr(self.options, "anchored_tensors", {})
        self._anchors = Anchors(
            anchored, self._names, self._buffer_names, training=training, default=self._output
        )
        self._host_state = HostOptimiserState(self)  # the optimiser's state_dict(), both ways
        self._host_weights = on_host.HostWeights()  # the module's weights, copied when read
        self._trainer: Any = None
        self._programs = SimulatedPrograms(self._mode_fields)  # simulated once each
        seed = self.options.random_seed
        self._seed = (torch.initial_seed() if seed is None else seed) % 2**31
        self._random: bool | None = None  # whether training draws random numbers (dropout)
        self._calls = 0
        self._forward = jax.jit(self._run_state)
        self._micro_forwards = jax.jit(functools.partial(micro_batch_forwards, self._run_state))
        self._attached = True
        self._compiled = False  # a step compiled (``compile`` or a call), not destroyed

    # --------------------------------------------------------------------- helpers
    def _weights(self) -> Weights:
        """The module's current weights by torchax's names (parameters and buffers)."""
        state = module_tensors(self._user_model)
        names = [*self._names, *self._constants]
        return {n: jax.numpy.asarray(to_jax_array(state[n])) for n in names}

    def _fn(self, weights: Weights, args: MicroBatch) -> Any:
        """The module's forward: its outputs."""
        return self._fn_state(weights, args)[0]

    def _run_state(
        self, weights: Weights, args: MicroBatch, first_index: ArrayLike
    ) -> tuple[Any, Weights]:
        """The module's forward, its random draws keyed by its first sample's index: its
        outputs and the buffers it leaves."""
        with holding_key(micro_batch_key(self._seed, first_index)):
            return self._fn_state(weights, args)

    def _outputs(self, params: Weights, micro_batch: MicroBatch) -> Any:
        """The module's outputs for one micro-batch of one replica (the trained weights and
        the constants)."""
        weights = {**self._constants, **params}
        if self._random:
            *inputs, index = micro_batch
            return self._run_state(weights, tuple(inputs), index[0])[0]
        return self._fn(weights, micro_batch)

    def _loss(self, params: Weights, micro_batch: MicroBatch) -> jax.Array:
        return pick_loss(self._outputs(params, micro_batch))

    def _loss_and_outputs(self, params: Weights, micro_batch: MicroBatch) -> tuple[jax.Array, Any]:
        """The loss and all the outputs, for a trainer that returns them (``has_aux``)."""
        out = self._outputs(params, micro_batch)
        return pick_loss(out), out

    def _training_batch(
        self, args: tuple[torch.Tensor | npt.ArrayLike, ...]
    ) -> tuple[HostBatch, HostBatch, np.ndarray]:
        """A training call's arrays, its laid-out batch (with the samples' global indices
        when the module draws random numbers) and the indices."""
        arrays = tuple(to_jax_array(a) for a in args)
        batch = self._layout(arrays)
        if self._random is None:
            weights = self._weights()
            self._random = draws_random(self._fn, weights, tuple(a[0, 0, 0] for a in batch))
        index = sample_indices(self._mode_fields, self._calls, arrays[0].shape[0])
        if self._random:
            batch = (*batch, self._layout((index,))[0])
        return arrays, batch, index

    def _layout(self, arrays: HostBatch) -> HostBatch:
        """The combined batch reshaped ``[device_iterations, accumulation, replicas, micro]``."""
        opts = self._mode_fields
        ga = opts.gradient_accumulation if self.training else 1
        return combined_layout(arrays, opts.device_iterations, ga, opts.replication_factor)

    def _make_trainer(self, batch: HostBatch) -> popdist_emu.Trainer:
        if self._trainer is None:
            self._anchors.check()
            weights = self._weights()
            params = {n: weights[n] for n in self._names}
            state = self._user_model.state_dict(keep_vars=True)  # the Parameter objects
            transform = optim.to_optax(self._optimizer, {n: state[n] for n in self._names})
            loss: Any = self._loss
            options: Any = self.options
            micro_batch = tuple(a[0, 0, 0] for a in batch)
            # The blocks of every style, found by one trace, become the emulator's stages.
            auto = getattr(self.options, "auto_recomputation", None)  # _Popart.set's
            self._strategy, blocked, placed = placed_blocks(
                self._loss, params, micro_batch, self._mode_fields, auto
            )
            if blocked is not None and placed is not None:
                loss, options = blocked, placed
                if options.layout != self._mode_fields.layout:  # outside the launcher
                    self._mode_fields = dataclasses.replace(
                        self._mode_fields, layout=options.layout
                    )
                    self._programs = SimulatedPrograms(self._mode_fields)
            self._check_buffers(batch, weights)  # before the trainer is kept: refusals stay
            with_outputs = self._outputs_in_step()  # one IPU: the step recomputes as PopART
            loss = self._loss_and_outputs if with_outputs else loss
            loss = loss if self._strategy else recomputed(loss, auto)
            self._trainer = self._host_state.load(
                popdist_emu.Trainer(loss, transform, params, options, has_aux=with_outputs)
            )
        return self._trainer

    def _outputs_in_step(self) -> bool:
        """Whether the step returns each micro-batch's outputs (one program whose buffers do
        not change; offline too, so that both modes simulate the same step)."""
        return self._strategy is None and self._replicas is None

    def _changed_buffers(
        self, weights: Weights, args: tuple[np.ndarray | jax.Array, ...], first: ArrayLike
    ) -> list[str]:
        """The buffers this model's forward changes (traced once, in its mode)."""
        if self._changing is None:
            self._changing = changed_buffers(
                lambda w, a: self._run_state(w, a, first), weights, args, self._buffer_names
            )
        return self._changing

    def _check_buffers(self, batch: HostBatch, weights: Weights) -> None:
        """Finds the buffers training changes and gives each local replica its copy
        (refused where PopTorch or the emulator cannot keep them; see ``_buffers``)."""
        inputs = len(batch) - 1 if self._random else len(batch)
        micro = tuple(a[0, 0, 0] for a in batch)
        changing = self._changed_buffers(weights, micro[:inputs], np.int32(0))
        if not changing:
            return
        params = {n: weights[n] for n in self._names}
        buffers = {n: weights[n] for n in changing}
        read = buffers_read_by(lambda b, m: self._loss({**params, **b}, m), buffers, micro)
        fields = self._mode_fields
        check_changing_buffers(
            changing,
            read,
            fields.num_total_replicas,
            self.options.broadcast_buffers,
            replica_local=replica_local_buffers(self._user_model),
        )
        self._replicas = ReplicaBuffers(buffers, fields.replication_factor)

    # ------------------------------------------------------------ PopTorch's calls
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs one call (``device_iterations`` steps in training) on the combined batch,
        the module in this model's mode (training or eval) whatever another model left."""
        args = forward_args(self._user_model, args, kwargs)  # by name: as forward's
        if self.options.synthetic_data:  # the device makes the inputs (``_synthetic``)
            instance = self._mode_fields.instance_index
            args = synthetic_inputs(args, self._seed, self._calls, instance)
        with in_mode(self._user_model, self.training):
            return self._infer(args) if not self.training else self._train(args)

    def _infer(self, args: tuple[torch.Tensor | npt.ArrayLike, ...]) -> Any:
        """An inference call; buffers its forward changes stay on the (simulated) IPU, as
        PopTorch keeps them, until ``copyWeightsToHost``."""
        self._attached = self._compiled = True
        arrays = tuple(to_jax_array(a) for a in args)
        first = np.int32(self._calls * arrays[0].shape[0] % 2**31)
        self._calls += 1
        weights = {**self._weights(), **self._device_buffers}
        micro = self._layout(arrays)  # [iterations, 1, replicas, micro, ...]
        out, buffers = self._micro_forwards(weights, micro, first)
        changing = self._changed_buffers(weights, tuple(a[0, 0, 0] for a in micro), first)
        if changing:
            fields = self._mode_fields
            check_inference_buffers(changing, fields.device_iterations, fields.num_total_replicas)
            self._device_buffers = {n: buffers[n] for n in changing}
        return to_torch(from_step(jax.tree.map(np.asarray, out), self._output))

    def _train(self, args: tuple[torch.Tensor | npt.ArrayLike, ...]) -> Any:
        """A training call: ``device_iterations`` optimiser steps; the outputs of this
        instance's replicas as the output mode lays them out (``_outputs``)."""
        self._attached = self._compiled = True
        arrays, batch, _ = self._training_batch(args)
        self._calls += 1
        trainer = self._make_trainer(batch)
        with self._programs.call(batch, lambda: self._simulate(batch)):
            return self._step(trainer, batch, len(arrays))

    def _step(self, trainer: popdist_emu.Trainer, batch: HostBatch, inputs: int) -> Any:
        """Runs the training call's step; the outputs for the host."""
        fields = self._mode_fields
        if trainer.has_aux:  # each micro-batch's outputs from its own forward in the step
            stepped = trainer.step(batch, each_iteration=self._anchors.recording(None))
            assert isinstance(stepped, tuple)  # with has_aux: (losses, outputs)
            self._host_weights.mark(self._trained_tensors, self._write_host)
            self._anchor(batch)
            return to_torch(from_step(stepped[1], self._output))
        shape = (fields.device_iterations, fields.gradient_accumulation)
        # Each micro-batch's forward beside the step: all of them where buffers change.
        passes = self._replicas or IterationOutputs(
            returned_micro_batches(self._output, *shape), fields.replication_factor
        )
        weights_of = lambda params: {**self._constants, **params}  # noqa: E731
        laid_out = LaidOutBatch(batch, inputs, bool(self._random))
        hook = passes.each_iteration(self._forward, weights_of, laid_out)
        trainer.step(batch, each_iteration=self._anchors.recording(hook))
        self._host_weights.mark(self._trained_tensors, self._write_host)
        self._anchor(batch)
        host = from_records(
            passes.outputs, self._output, iterations=shape[0], accumulation=shape[1],
            replicas=fields.replication_factor,
        )  # fmt: skip
        return to_torch(host)

    def _anchor(self, batch: HostBatch) -> None:
        """The anchored tensors' values after a training call (``_anchors``)."""
        replicas = self._mode_fields.replication_factor
        self._anchors.collect(self._loss, self._trainer.params, self._user_model, batch, replicas)

    def copyWeightsToHost(self) -> None:  # noqa: N802
        """Copies the trained parameters, and buffers the forward changed, into the torch
        module (PopTorch's weight copy; a read of the module's weights makes it too)."""
        self._host_weights.forget()
        write_buffers(self._user_model, self._device_buffers)
        self._write_host()

    def _write_host(self) -> None:
        """The copy a read of stale weights makes: the trainer's into the module."""
        if self._trainer is not None:
            params = self._trainer.params
            buffers = {} if self._replicas is None else self._replicas.first
            on_host.write_to_host(self._user_model, {n: params[n] for n in self._names}, buffers)

    def _trained_tensors(self) -> list[torch.Tensor]:
        """The module's tensors a training call changes (stale until read)."""
        changed = [] if self._replicas is None else list(self._replicas.first)
        return on_host.module_tensors(self._user_model, [*self._names, *changed])

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:  # noqa: N802
        """Changes each parameter group's learning rate from the next call on, keeping the
        optimiser state.

        Raises:
            ValueError: another optimiser class or a change other than the learning rates.
        """
        rates = changed_learning_rates(self._optimizer, optimizer)
        self._optimizer = self._host_state.follow(optimizer)
        trainer = self._trainer
        if trainer is not None and trainer.state is not None:  # no state offline
            state = trainer.state
            trainer.state = state._replace(opt_state=set_learning_rates(state.opt_state, rates))

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Compiles the step for this combined batch's shapes without running it."""
        args = forward_args(self._user_model, args, kwargs)
        with in_mode(self._user_model, self.training):
            if not self.training:
                arrays = self._layout(tuple(to_jax_array(a) for a in args))
                self._micro_forwards.lower(self._weights(), arrays, np.int32(0))
                self._compiled = True
                return
            _, batch, _ = self._training_batch(args)
            trainer = self._make_trainer(batch)
            if trainer.offline:
                self._programs.compiled(batch, lambda: self._simulate(batch))
            else:
                trainer.compile(batch)
        self._compiled = True

    def _simulate(self, batch: HostBatch) -> Any:
        """One step simulated on the job's IPU system (``_simulated`` reports it)."""
        params = self._trainer.step_shapes(batch).params  # one micro-batch's output shapes:
        out = jax.eval_shape(self._outputs, params, tuple(a[0, 0, 0] for a in batch))
        name, fields = type(self._user_model).__name__, self._mode_fields
        return simulate_step(
            self._trainer, batch, name=name, outputs=out, fields=fields, mode=self._output,
            synthetic=self.options.synthetic_data,
        )  # fmt: skip

    def detachFromDevice(self) -> None:  # noqa: N802
        """Releases the (simulated) IPUs; the next call attaches again."""
        if self.training:  # PopTorch reads the weights and optimiser state back first
            self._host_state.to_host()
        self._attached = False

    def destroy(self) -> None:
        """Drops the compiled step (the module and optimiser keep the weights and state)."""
        self._host_state.to_host()
        self._trainer = None
        self._compiled = False


def trainingModel(  # noqa: N802
    model: torch.nn.Module,
    options: PopTorchOptions | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> PoplarExecutor:
    """``poptorch.trainingModel``: ``model`` trained by each call on the combined batch."""
    return PoplarExecutor(model, options, optimizer, training=True)


def inferenceModel(  # noqa: N802
    model: torch.nn.Module, options: PopTorchOptions | None = None
) -> PoplarExecutor:
    """``poptorch.inferenceModel``: ``model``'s forward on the combined batch."""
    return PoplarExecutor(model, options, None, training=False)
