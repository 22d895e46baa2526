"""The ``PoplarExecutor`` calls beyond running a step: the wrapped module and the device.

PopTorch's ``trainingModel``/``inferenceModel`` return a ``PoplarExecutor`` that stands in
for the user's module: an attribute the executor does not define is the wrapped module's
(``model.train()``, ``.eval()``, ``.state_dict()``, ``.named_parameters()``, a custom
attribute or method), ``.model`` is the module itself, and ``load_state_dict`` loads the
module and writes the weights to the device. PopTorch also makes the module an instance of a
subclass of its own class (``Poptorch<Name>``) to copy weights back lazily; the executor
itself is no subclass of the module's class (``isinstance(model, poptorch.PoplarExecutor)``
holds, as Graphcore's programs test it), and the emulator keeps the module's class as it is
(the weights are the host's after every call).

The device calls, with PopTorch's semantics where the emulator has one:

- ``isCompiled()``: a step was compiled (by ``compile`` or the first call) and not
  destroyed; ``isAttachedToDevice()`` is False before that, as in PopTorch;
- ``attachToDevice()``: refused in one line unless compiled and detached, as PopTorch
  refuses it; then the (simulated) IPUs are held again;
- ``copyWeightsToDevice()``: the module's parameters and buffers, as the host holds them,
  become the device's (PopTorch's explicit weight copy), refused before a compile;
- ``getLatency()``: PopTorch's ``(min, max, average)`` round-trip latency in seconds over the
  device iterations of the last call. Each iteration of the simulated step takes the
  simulated step time, so the three are that time; an inference model (not simulated, see
  ``_simulated``) and a model not yet run get a one-line refusal saying why;
- ``compileAndExport(filename, *args)`` / ``loadExecutable(filename)``: there is no Poplar
  executable to write, so the file records what one is compiled from (the module's class,
  its parameters' names, shapes and dtypes, training or inference, the options and the
  inputs' shapes and dtypes, as JSON); ``loadExecutable`` refuses in one line a file that
  does not match this model and its options, else compiles for the recorded inputs, as
  PopTorch loads the executable in place of compiling;
- ``getTensorNames()`` / ``getAnchoredTensor(name)``: see ``_anchors`` (names refused
  before a compile, as PopTorch refuses them).

References:
    PopTorch User Guide, "Reference" (``poptorch.PoplarExecutor``: ``model``,
    ``load_state_dict``, ``isCompiled``, ``attachToDevice``, ``detachFromDevice``,
    ``copyWeightsToDevice``, ``getLatency``, ``compileAndExport``, ``loadExecutable``) and
    "Precompilation and caching"; graphcore/poptorch ``python/_poplar_executor.py`` (the
    attribute forwarding and the subclass of the module's class); graphcore/examples
    ``vision/cnns/pytorch/train/validate.py`` and ``inference/run_benchmark.py`` (how the
    calls are used).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import torch

from popdist_emu.poptorch import _host_weights as on_host
from popdist_emu.poptorch._arrays import to_jax_array

if TYPE_CHECKING:
    from popdist_emu.popdist import PopTorchOptions
    from popdist_emu.poptorch._anchors import Anchors
    from popdist_emu.poptorch._buffers import ReplicaBuffers
    from popdist_emu.poptorch._simulated import SimulatedPrograms

_FORMAT = "popdist-emu PopTorch executable record 1"


def _spec(tensor: Any) -> list[Any]:
    """A tensor's shape and dtype, for the record (JSON)."""
    array = to_jax_array(tensor)
    return [list(array.shape), str(array.dtype)]


class DeviceCalls:
    """The mixin of :class:`PoplarExecutor` with the calls of the module docstring."""

    _user_model: torch.nn.Module
    _names: list[str]
    _constants: dict[str, Any]
    _host_weights: on_host.HostWeights
    _trainer: Any
    _attached: bool
    _compiled: bool
    _device_buffers: dict[str, Any]
    _replicas: ReplicaBuffers | None
    _programs: SimulatedPrograms
    _anchors: Anchors
    options: PopTorchOptions
    training: bool

    def compile(self, *args: Any) -> None:  # the executor's
        raise NotImplementedError

    # ---------------------------------------------------------- the wrapped module
    def __getattr__(self, name: str) -> Any:
        """An attribute the executor does not have: the wrapped module's, as in PopTorch."""
        if name.startswith("__") or "_user_model" not in vars(self):
            raise AttributeError(name)
        model = vars(self)["_user_model"]
        try:
            return getattr(model, name)
        except AttributeError:
            raise AttributeError(
                f"{type(model).__name__} wrapped by poptorch has no attribute {name!r}: neither "
                "the module nor PopTorch's PoplarExecutor defines it."
            ) from None

    @property
    def model(self) -> torch.nn.Module:
        """The wrapped torch module (PopTorch's ``PoplarExecutor.model``)."""
        return self._user_model

    @property
    def _executable(self) -> object | None:
        """Truthy once compiled (Graphcore's CNNs test ``model._executable``)."""
        return self if self.isCompiled() else None

    def load_state_dict(self, state_dict: dict[str, torch.Tensor], strict: bool = True) -> Any:
        """Loads the module's ``state_dict`` and, when attached, writes it to the device."""
        out = self._user_model.load_state_dict(state_dict, strict)
        if self.isAttachedToDevice():
            self.copyWeightsToDevice()
        return out

    # ------------------------------------------------------------------ the device
    def isCompiled(self) -> bool:  # noqa: N802
        """Whether a step was compiled (``compile`` or a first call) and not destroyed."""
        return self._compiled

    def isAttachedToDevice(self) -> bool:  # noqa: N802
        """Whether the model holds its IPUs (False before it is compiled, as in PopTorch)."""
        return self._compiled and self._attached

    def _refuse_uncompiled(self, call: str) -> None:
        if not self._compiled:
            raise RuntimeError(
                f"poptorch model.{call}(): the model is not compiled yet; call it on a batch "
                "or call model.compile(batch) first."
            )

    def attachToDevice(self) -> None:  # noqa: N802
        """Holds the (simulated) IPUs again after ``detachFromDevice``.

        Raises:
            RuntimeError: not compiled, or already attached (as PopTorch refuses).
        """
        self._refuse_uncompiled("attachToDevice")
        if self._attached:
            raise RuntimeError(
                "poptorch model.attachToDevice(): the model is already attached; call "
                "detachFromDevice() first, or test isAttachedToDevice()."
            )
        self._attached = True

    def copyWeightsToDevice(self) -> None:  # noqa: N802
        """The module's parameters and buffers, as the host holds them, become the device's.

        Raises:
            RuntimeError: not compiled (as PopTorch refuses).
        """
        self._refuse_uncompiled("copyWeightsToDevice")
        self._host_weights.forget()  # the host's weights are the newer ones from now on
        self._device_buffers = {}  # inference: the device's changed buffers are replaced
        trainer = self._trainer
        if trainer is not None and trainer.state is not None:
            on_host.copy_to_device(
                self._user_model, trainer, self._names, self._constants, self._replicas
            )
        elif self._replicas is not None:  # each replica's copy of what the forward changes
            buffers = dict(self._user_model.named_buffers(remove_duplicate=False))
            for replica in self._replicas.per_replica:
                replica.update({n: jax.numpy.asarray(to_jax_array(buffers[n])) for n in replica})

    def getTensorNames(self) -> list[str]:  # noqa: N802
        """The tensors ``Options.anchorTensor`` can name (``_anchors``), once compiled.

        Raises:
            RuntimeError: not compiled (as PopTorch refuses).
        """
        self._refuse_uncompiled("getTensorNames")
        return self._anchors.names()

    def getAnchoredTensor(self, short_name: str) -> Any:  # noqa: N802
        """The anchored tensor ``short_name`` after the latest call (``_anchors``).

        Raises:
            ValueError: an inference model's anchor, an unknown name, or no call yet.
        """
        if not self.training:
            self._anchors.check()
        return self._anchors.get(short_name)

    def getLatency(self) -> tuple[float, float, float]:  # noqa: N802
        """PopTorch's ``(min, max, average)`` round-trip latency of the last call's device
        iterations, in seconds: the simulated step's time for each.

        Raises:
            RuntimeError: an inference model, or no training call simulated yet.
        """
        if not self.training:
            raise RuntimeError(
                "poptorch model.getLatency(): the emulator simulates training steps only, not "
                "an inference model's forwards, so it has no latency to give; time a training "
                "model instead."
            )
        latest = self._programs.latest
        if latest is None:
            raise RuntimeError(
                "poptorch model.getLatency(): no call has run yet; call the model on a batch first."
            )
        seconds = float(latest.simulated_step_seconds)
        return seconds, seconds, seconds

    # -------------------------------------------------------------- export and load
    def _record(self, args: tuple[Any, ...]) -> dict[str, Any]:
        """What an executable is compiled from (module docstring), JSON-ready."""
        params = dict(self._user_model.named_parameters(remove_duplicate=False))
        fields = self.options.to_options()
        return {
            "format": _FORMAT,
            "model": type(self._user_model).__qualname__,
            "training": self.training,
            "parameters": {n: _spec(p) for n, p in params.items()},
            "options": {
                "replication_factor": fields.replication_factor,
                "device_iterations": fields.device_iterations,
                "gradient_accumulation": fields.gradient_accumulation,
                "execution_strategy": repr(fields.execution_strategy),
                "output_mode": getattr(self.options, "poptorch_output_mode", None),
            },
            "inputs": [_spec(a) for a in args],
        }

    def compileAndExport(  # noqa: N802
        self, filename: str | os.PathLike[str], *args: Any, export_model: bool = True
    ) -> None:
        """Compiles for ``args`` and writes the record of this executable to ``filename``
        (``export_model`` is accepted: the module stays the program's to rebuild)."""
        self.compile(*args)
        with open(filename, "w", encoding="utf-8") as file:
            json.dump(self._record(args), file, indent=1)

    def loadExecutable(self, filename: str | os.PathLike[str]) -> None:  # noqa: N802
        """Loads a record written by ``compileAndExport``: checked against this model and
        its options, then compiled for the recorded inputs.

        Raises:
            ValueError: not such a record, or one of another model, mode or options.
        """
        try:
            with open(filename, encoding="utf-8") as file:
                saved = json.load(file)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(
                f"poptorch model.loadExecutable({str(filename)!r}): cannot read it ({error}); "
                "pass a file written by compileAndExport."
            ) from None
        if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
            raise ValueError(
                f"poptorch model.loadExecutable({str(filename)!r}): not a file written by the "
                "emulator's compileAndExport; export it again with model.compileAndExport."
            )
        inputs = [torch.zeros(shape, dtype=_torch_dtype(dtype)) for shape, dtype in saved["inputs"]]
        mine = self._record(tuple(inputs))
        for key in ("model", "training", "parameters", "options"):
            what, theirs, ours = _first_difference(key, saved.get(key), mine[key])
            if theirs != ours:
                raise ValueError(
                    f"poptorch model.loadExecutable({str(filename)!r}): its {what} is "
                    f"{_short(theirs)}, this model's {_short(ours)}; export it again from this "
                    "model and options."
                )
        self.compile(*inputs)


def _torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a numpy dtype's name (``float32``, ``int64``, ``bool``)."""
    return torch.from_numpy(np.zeros(0, dtype=name)).dtype


def _first_difference(key: str, theirs: Any, ours: Any) -> tuple[str, Any, Any]:
    """The first entry where two records' ``key`` differ (a dict's item by item)."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for name in sorted(set(theirs) | set(ours)):
            if theirs.get(name) != ours.get(name):
                return f"{key} {name!r}", theirs.get(name), ours.get(name)
    return key, theirs, ours


def _short(value: Any) -> str:
    """A value for a one-line message: at most 80 characters."""
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."
