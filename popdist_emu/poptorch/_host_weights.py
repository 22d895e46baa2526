"""The torch module's weights on the host: copied from the device only when the host reads them.

PopTorch keeps a training model's weights on the IPU and copies them into the torch module
when the host needs them: ``copyWeightsToHost()``, ``detachFromDevice()``, a read of the
module's parameters or buffers (``parameters()``, ``state_dict()``, ``model.fc.weight``, a
torch operation on a weight, ``torch.save``), and the run of an inference model of the same
module. A call that nobody reads after costs no copy. :class:`HostWeights` does the same for
a :class:`PoplarExecutor`:

- after a training call the tensors the step changed (the trained parameters, the buffers
  the forward changes) are marked stale: each one's class becomes a subclass of its own
  (``Parameter``, ``Tensor``) whose attribute lookup first copies the weights from the
  device and gives every tensor its own class back. Torch's check for ``__torch_function__``
  on a tensor subclass is such a lookup, so a torch operation, ``np.asarray``, pickling and
  ``copy.deepcopy`` of a stale weight see the trained values too, however the program holds
  the tensor (through the module, ``optimizer.param_groups`` or a reference kept from
  before). PopTorch's executor does the same with its ``PoptorchParameter`` and
  ``PoptorchBuffer`` classes;
- the marks are made once per read: a call that finds the weights still stale only keeps
  them so (no copy, no walk over the module), and the copy reads the trained weights of the
  last call;
- the host's writes reach the device as in PopTorch: ``copyWeightsToDevice()`` (and the
  executor's ``load_state_dict``) copies the module's parameters, and the buffers the
  forward changes, to the device; weights still stale then are not read first (PopTorch
  clears its "host weights dirty" flag there too), and a write to a weight reads it first,
  so a write is never overwritten by an older copy. A frozen parameter or a buffer the
  forward does not change is compiled into the step: a new value after the first call is
  refused in one line.

References:
    PopTorch User Guide, "Model wrapping functions" (``copyWeightsToHost``,
    ``copyWeightsToDevice``: "Implicitly called on first call", ``detachFromDevice``) and
    "Model training and inference" (the training model's weights are copied to the host when
    the inference model of the same module runs); graphcore/poptorch
    ``python/_poplar_executor.py`` (``copyWeightsToHostIfNeeded``, the weights' wrapper
    classes; https://github.com/graphcore/poptorch); PyTorch, "Extending torch with a Tensor
    subclass" (``__torch_function__`` is looked up on every torch call with a subclass).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import torch

from popdist_emu.poptorch._arrays import to_jax_array
from popdist_emu.poptorch._buffers import module_tensors as named_tensors

if TYPE_CHECKING:
    from popdist_emu.poptorch._buffers import ReplicaBuffers
    from popdist_emu.runtime import Trainer


class HostWeights:
    """The weights of one executor's module: stale after a training call until read."""

    def __init__(self) -> None:
        self._write: Callable[[], None] | None = None  # the copy a read must make first
        self._stale: list[tuple[torch.Tensor, type]] = []  # each stale tensor, its class
        self._classes: dict[type, type] = {}  # a tensor class -> its stale subclass

    @property
    def stale(self) -> bool:
        """Whether the module's weights wait for a copy from the device."""
        return self._write is not None

    def mark(
        self, tensors: Callable[[], Iterable[torch.Tensor]], write: Callable[[], None]
    ) -> None:
        """After a training call: ``tensors()`` are stale until read, then ``write()`` copies
        the device's weights into the module (``tensors`` is only walked when the weights
        were read since the last call)."""
        if self._write is not None:
            self._write = write
            return
        self._write = write
        for tensor in tensors():
            cls = type(tensor)
            try:
                tensor.__class__ = self._stale_class(cls)
            except TypeError:  # a tensor class whose layout a subclass cannot take
                self.refresh()
                return
            self._stale.append((tensor, cls))

    def refresh(self) -> None:
        """Copies the device's weights into the module if they are stale (a read)."""
        write = self.forget()
        if write is not None:
            write()

    def forget(self) -> Callable[[], None] | None:
        """Gives every stale tensor its class back without copying (the host's weights win:
        ``copyWeightsToDevice``); returns the copy that was pending."""
        write, self._write = self._write, None
        stale, self._stale = self._stale, []
        for tensor, cls in stale:
            object.__setattr__(tensor, "__class__", cls)
        return write

    def _stale_class(self, cls: type) -> type:
        """``cls``'s stale subclass: any attribute read refreshes the weights first."""
        if cls not in self._classes:
            owner = self

            def __getattribute__(tensor: torch.Tensor, name: str) -> Any:  # noqa: N807
                owner.refresh()  # gives the tensor its class back
                return object.__getattribute__(tensor, name)

            namespace = {"__getattribute__": __getattribute__, "__module__": cls.__module__}
            self._classes[cls] = type(cls.__name__, (cls,), namespace)
        return self._classes[cls]


def write_to_host(
    model: torch.nn.Module, params: Mapping[str, jax.Array], buffers: Mapping[str, jax.Array]
) -> None:
    """Copies trained parameters and buffers (by the module's names) into ``model``."""
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    with torch.no_grad():
        for name, value in {**params, **buffers}.items():
            named[name].copy_(torch.from_numpy(np.array(value)))


def host_values(
    model: torch.nn.Module, names: Iterable[str], like: Mapping[str, Any], what: str
) -> dict[str, np.ndarray]:
    """The module's current values of ``names``, checked against the device's (``like``).

    Raises:
        ValueError: a weight whose shape or dtype is not the compiled step's.
    """
    state = named_tensors(model)
    out = {}
    for name in names:
        value, want = to_jax_array(state[name]), like[name]
        if value.shape != tuple(want.shape) or value.dtype != want.dtype:
            raise ValueError(
                f"poptorch {what}: {name} is {value.dtype}{list(value.shape)} on the host, "
                f"the compiled step's is {np.dtype(want.dtype)}{list(want.shape)}: keep a "
                f"weight's shape and dtype, or wrap the module again with trainingModel."
            )
        out[name] = value
    return out


def check_constants(model: torch.nn.Module, constants: Mapping[str, jax.Array], what: str) -> None:
    """Refuses a new host value of a weight compiled into the step (a frozen parameter or a
    buffer the forward does not change).

    Raises:
        ValueError: such a weight differs from the value the step was compiled with.
    """
    for name, value in host_values(model, constants, constants, what).items():
        if not np.array_equal(value, np.asarray(constants[name]), equal_nan=True):
            raise ValueError(
                f"poptorch {what}: {name} changed on the host, but it is not trained and "
                f"the step was compiled with its value: set it before the first call, or "
                f"wrap the module again with trainingModel."
            )


def device_copies(values: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    """Private device copies (the update donates the parameters' buffers)."""
    return {name: jax.device_put(np.array(value)) for name, value in values.items()}


def module_tensors(model: torch.nn.Module, names: Iterable[str]) -> list[torch.Tensor]:
    """The module's parameters and buffers of ``names`` (the tensor objects)."""
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return [named[name] for name in names]


def copy_to_device(
    model: torch.nn.Module,
    trainer: Trainer,
    names: list[str],
    constants: Mapping[str, jax.Array],
    replicas: ReplicaBuffers | None,
) -> None:
    """``copyWeightsToDevice``: the module's trained parameters become the trainer's, the
    buffers the forward changes every local replica's (the optimiser state is kept).

    Raises:
        ValueError: a weight of another shape or dtype, or a new value of one compiled into
            the step.
    """
    what = "copyWeightsToDevice"
    check_constants(model, constants, what)
    state = trainer.state
    assert state is not None  # the caller checks: offline trainers hold no values
    params = host_values(model, names, state.params, what)
    trainer.state = state._replace(params=device_copies(params))
    if replicas is not None:
        buffers = device_copies(host_values(model, replicas.first, replicas.first, what))
        replicas.per_replica = [dict(buffers) for _ in replicas.per_replica]
