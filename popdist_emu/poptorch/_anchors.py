"""PopTorch's anchored tensors: ``opts.anchorTensor(short, long)``, then
``model.getAnchoredTensor(short)`` after each call, and ``model.getTensorNames()``.

PopTorch names a training step's tensors as PopART does; the emulator provides those a
training step has whatever compiled it, by PopART's names for them:

- ``<weight>`` (a parameter's name in the module, e.g. ``fc.weight``): the weight as the
  micro-batch's forward read it (its device iteration's weights);
- ``Gradient___<weight>``: the gradient of that micro-batch's loss (the forward's loss as
  it returns it) with respect to the weight, before accumulation and the replicas'
  reduction, as PopART computes it per micro-batch;
- ``UpdatedVar___<weight>``: the weight after its device iteration's update;
- ``<buffer>`` (e.g. ``bn.running_mean``): the buffer as the host holds it after the call.

Each anchor is laid out as a call's outputs are (``_outputs``): its own ``output_mode``
(``anchorTensor``'s argument) or else the model's, so by default (Final in training) each
local replica's last micro-batch's value. They are computed after the step from the
weights each device iteration trained from (kept only while anchors are set) by one more
gradient pass per returned micro-batch, so anchoring changes no number of the training.
Activations inside the forward have PopART operation names that depend on its compiler
(``MatMul:0/1`` ...); the emulator has none, so such a name is refused in one line listing
what it has, as is anchoring on an inference model (whose anchors PopTorch names by the
same compiler).

References:
    PopTorch User Guide, "Debugging your model" ("Inspecting tensors", "Anchoring tensors",
    "Retrieving tensors": ``getTensorNames``, ``Options.anchorTensor``,
    ``getAnchoredTensor``; the names ``Gradient___`` and ``UpdatedVar___``); graphcore/examples
    ``tutorials/tutorials/pytorch/observing_tensors`` (anchoring gradients and updated
    weights for histograms).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from popdist_emu.poptorch._arrays import HostBatch, Weights, to_jax_array, to_torch
from popdist_emu.poptorch._outputs import (
    OutputMode,
    from_records,
    resolve_mode,
    returned_micro_batches,
)

if TYPE_CHECKING:
    import torch

GRADIENT, UPDATED = "Gradient___", "UpdatedVar___"
Hook = Callable[[int, Weights], None]


class Anchors:
    """A training model's anchored tensors (module docstring).

    Args:
        anchored: ``opts.anchored_tensors``: short name -> (long name, mode name or None,
            EveryN's period).
        weights: the trainable parameters' names; buffers: the buffers' names.
        training: whether the model trains (an inference model's anchors are refused).
        default: the model's own output mode.
    """

    def __init__(
        self,
        anchored: dict[str, tuple[str, str | None, int]],
        weights: list[str],
        buffers: list[str],
        *,
        training: bool,
        default: OutputMode,
    ) -> None:
        self._anchored = dict(anchored)
        self._weights, self._buffers = list(weights), list(buffers)
        self._training, self._default = training, default
        self._iterations: dict[int, dict[str, Any]] = {}  # each device iteration's weights
        self._values: dict[str, Any] = {}
        self._gradient: Callable[[Weights, Any], Weights] | None = None

    def names(self) -> list[str]:
        """What ``getTensorNames`` lists: the tensors anchors can name."""
        names = [*self._weights, *self._buffers]
        if self._training:
            names += [GRADIENT + n for n in self._weights] + [UPDATED + n for n in self._weights]
        return names

    def _mode(self, short: str, iterations: int) -> OutputMode:
        _, mode, period = self._anchored[short]
        if mode is None:
            return self._default
        return resolve_mode(mode, period, training=True, iterations=iterations)

    def check(self) -> None:
        """Refuses, in one line, an anchor on an inference model or of an unknown tensor."""
        known = set(self.names())
        for short, (long, _, _) in self._anchored.items():
            if not self._training:
                raise ValueError(
                    f"Options.anchorTensor({short!r}, {long!r}): the emulator anchors a training "
                    "model's tensors only; anchor them on the trainingModel."
                )
            if long not in known:
                example = ", ".join(repr(n) for n in self.names()[:3])
                raise ValueError(
                    f"Options.anchorTensor({short!r}, {long!r}): this model has no such tensor; "
                    f"it has {example}, ... (model.getTensorNames() lists them)."
                )

    def recording(self, inner: Hook | None) -> Hook | None:
        """The step's ``each_iteration`` hook, keeping each iteration's weights when anchors
        are set (copies: the update reuses the weights' buffers), then calling ``inner``."""
        if not self._anchored:
            return inner

        def hook(d: int, params: Weights) -> None:
            self._iterations[d] = {n: np.array(v) for n, v in params.items()}
            if inner is not None:
                inner(d, params)

        return hook

    def collect(
        self,
        loss: Callable[[Weights, Any], jax.Array],
        trained: Weights,
        module: torch.nn.Module,
        batch: HostBatch,
        replicas: int,
    ) -> None:
        """Each anchor's value after a call (module docstring); ``batch`` is laid out
        ``[iterations, accumulation, replicas, micro, ...]``, ``trained`` the weights after
        the call, ``module`` holds the buffers the host has."""
        if not self._anchored:
            return
        host_buffers = {n: to_jax_array(b) for n, b in module.named_buffers()}
        iterations, accumulation = batch[0].shape[:2]
        weights: dict[int, dict[str, Any]] = {d: self._iterations[d] for d in range(iterations)}
        weights[iterations] = {n: np.asarray(v) for n, v in trained.items()}
        if self._gradient is None:  # compiled once per batch shape, as the step is
            self._gradient = jax.jit(jax.grad(loss))
        for short, (long, _, _) in self._anchored.items():
            mode = self._mode(short, iterations)
            records = {}
            for d, a in returned_micro_batches(mode, iterations, accumulation):
                for k in range(replicas):
                    if long in self._buffers:
                        records[d, a, k] = np.asarray(host_buffers[long])
                    else:
                        records[d, a, k] = self._value(long, weights, d, batch, (a, k))
            self._values[short] = from_records(
                records, mode, iterations=iterations, accumulation=accumulation, replicas=replicas
            )
        self._iterations.clear()

    def _value(
        self,
        long: str,
        weights: dict[int, dict[str, Any]],
        d: int,
        batch: HostBatch,
        micro: tuple[int, int],
    ) -> Any:
        """``long``'s value for device iteration ``d``'s micro-batch ``micro`` (a, replica)."""
        if long.startswith(GRADIENT):
            a, k = micro
            assert self._gradient is not None
            grads = self._gradient(weights[d], tuple(x[d, a, k] for x in batch))
            return np.asarray(grads[long.removeprefix(GRADIENT)])
        if long.startswith(UPDATED):
            return weights[d + 1][long.removeprefix(UPDATED)]
        return weights[d][long]

    def get(self, short: str) -> Any:
        """``getAnchoredTensor(short)``: the anchor's value after the latest call.

        Raises:
            ValueError: no anchor of that name, or no call has run since it was set.
        """
        if short not in self._anchored:
            known = ", ".join(repr(n) for n in self._anchored) or "none"
            raise ValueError(
                f"poptorch model.getAnchoredTensor({short!r}): no anchor of that name (anchored: "
                f"{known}); set it with opts.anchorTensor({short!r}, tensor_name)."
            )
        if short not in self._values:
            raise ValueError(
                f"poptorch model.getAnchoredTensor({short!r}): no call has run yet; call the "
                "model on a batch first."
            )
        return to_torch(self._values[short])
