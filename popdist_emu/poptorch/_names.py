"""PopTorch names that change no number in the emulator, provided so programs run unchanged.

- ``poptorch.serializedMatMul(lhs, rhs, mode, factor, keep_precision)``: PopTorch splits the
  product into ``factor`` smaller ones computed one after another, to save the IPU's
  temporary memory; the result is the same product, so it is ``torch.matmul`` here. The
  emulator's compiled program and its hardware model see one unsplit matmul: the same
  FLOPs, the unsplit product's temporary memory (an upper bound on what the serialised one
  needs), no extra cycles for the serial parts.
- ``poptorch.setLogLevel(level)``: PopTorch's own log level (``TRACE`` ... ``OFF`` or 0-6).
  Checked and accepted, no effect: it governs PopTorch's and Poplar's logging, and the
  emulator's progress lines stand for PopTorch's compilation progress bar, which the log
  level does not silence either.
- ``poptorch.Attribute(**attributes)``: a context manager that attaches attributes (e.g.
  BERT's ``__outline``) to the operations made in its scope, for PopART's outliner. It
  changes neither numbers nor the emulator's simulated time: accepted, named once.
  ``__enter__`` returns None, as PopTorch's does: BERT calls it from a forward pre-hook,
  where a value would replace the module's inputs.
- ``torch.ops.poptorch.push_name_scope(name)`` / ``pop_name_scope()``: PopTorch's op-name
  scopes for PopVision (Graphcore's CNNs and Swin call them from forward hooks on every
  module). Registered with ``torch.library`` as no-op operators, so the calls work in eager
  PyTorch and under torchax's tracing, once torch is imported with ``poptorch``;
  ``internal_cast(tensor, dtype)`` (DINO) casts to PopART's type name (``FLOAT``,
  ``FLOAT16``, ``INT32``, ...), as a composite operator, so torchax sees the cast itself.
- ``poptorch.for_loop(count, body, inputs)``: PopTorch's on-device loop; the body runs
  ``count`` times, each run's outputs the next one's inputs (unrolled here: the same
  numbers, and the hardware model sees every iteration's operations).
- ``poptorch.set_overlap_for_input(tensors, mode)`` / ``set_overlap_for_output``: mark host
  transfers to overlap the compute on I/O tiles; the tensors are returned unchanged. The
  simulated step does not model I/O tiles (``numIOTiles`` is accepted without effect), and
  it already overlaps the host link with the compute through the infeed's prefetch.
- ``with poptorch.MultiConv():``: PopTorch plans the convolutions in its scope together, to
  run in parallel; the same results, and the hardware model plans each convolution on its
  own. Its setters (``availableMemoryProportions``, ``partialsTypes``, ``planType``, ...)
  are accepted and return the ``MultiConv``, as PopTorch's do; named once.
- ``poptorch.AsynchronousDataAccessor(dataset, ...)``: PopTorch loads the dataset's batches
  in a background process into a ring buffer; here it iterates the dataset (usually a
  ``poptorch.DataLoader``, whose workers the simulated host already counts) in the caller,
  yielding the same batches in the same order; ``rebatched_size`` is refused in one line.

References:
    PopTorch User Guide, "Reference" (``poptorch.serializedMatMul``,
    ``poptorch.MatMulSerializationMode``, ``poptorch.setLogLevel``, ``poptorch.Attribute``)
    and "Environment variables" (``POPTORCH_LOG_LEVEL``); graphcore/examples
    ``nlp/bert/pytorch/modeling.py`` (``SerializedLinear``, ``outline_attribute``),
    ``vision/cnns/pytorch/models/models.py`` (``name_scope_hook``); PopTorch User Guide,
    "Reference" (``poptorch.for_loop``, ``set_overlap_for_input``, ``OverlapMode``,
    ``MultiConv``, ``AsynchronousDataAccessor``); PyTorch documentation,
    ``torch.library.Library`` (``define``, ``impl``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from popdist_emu.poptorch._api import MatMulSerializationMode, OverlapMode, SharingStrategy

if TYPE_CHECKING:
    import torch

# PopTorch's levels, by name and by number (``poptorch.setLogLevel``).
_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERR", "CRITICAL", "OFF")
_WARNED: set[str] = set()
_LIBRARY: list[Any] = []  # the torch.library.Library that owns the ops, kept alive


def serializedMatMul(  # noqa: N802
    lhs: torch.Tensor,
    rhs: torch.Tensor,
    mode: MatMulSerializationMode,
    factor: int = 0,
    keep_precision: bool = False,
) -> torch.Tensor:
    """``lhs @ rhs``, checked as PopTorch checks its serialised form (module docstring).

    Raises:
        ValueError: ``mode`` is not a ``MatMulSerializationMode``, ``factor`` not an int, or
            ``factor`` does not divide the dimension ``mode`` splits.
    """
    import torch

    if not isinstance(mode, MatMulSerializationMode):
        raise ValueError(
            f"poptorch.serializedMatMul(mode={mode!r}): pass a poptorch.MatMulSerializationMode "
            "member, e.g. poptorch.MatMulSerializationMode.OutputChannels."
        )
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 0:
        raise ValueError(f"poptorch.serializedMatMul(factor={factor!r}): pass an int >= 0.")
    split = {
        MatMulSerializationMode.InputChannels: ("lhs", -2),
        MatMulSerializationMode.ReducingDim: ("lhs", -1),
        MatMulSerializationMode.OutputChannels: ("rhs", -1),
    }.get(mode)
    if split is not None and factor > 1:
        size = (lhs if split[0] == "lhs" else rhs).shape[split[1]]
        if size % factor:
            raise ValueError(
                f"poptorch.serializedMatMul({mode.name}, factor={factor}): the split dimension "
                f"has size {size}, which {factor} does not divide; pass a factor of {size}."
            )
    return torch.matmul(lhs, rhs)


def setLogLevel(level: int | str) -> None:  # noqa: N802
    """``poptorch.setLogLevel``: checked, no effect (module docstring).

    Raises:
        ValueError: not one of PopTorch's levels.
    """
    known = level in _LOG_LEVELS or (
        isinstance(level, int) and not isinstance(level, bool) and 0 <= level < len(_LOG_LEVELS)
    )
    if not known:
        raise ValueError(
            f"poptorch.setLogLevel({level!r}): PopTorch's levels are {', '.join(_LOG_LEVELS)} "
            f"or 0-{len(_LOG_LEVELS) - 1}."
        )


class Attribute:
    """``with poptorch.Attribute(**attributes):``: accepted, no effect (module docstring)."""

    def __init__(self, **attributes: Any) -> None:
        self.attributes = attributes
        if "Attribute" not in _WARNED:
            _WARNED.add("Attribute")
            warnings.warn(
                "poptorch.Attribute: accepted, no effect in the emulator (operation attributes "
                "steer PopART's compiler, not the numbers or the simulated time)",
                stacklevel=2,
            )

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def register_torch_ops() -> None:
    """Registers ``torch.ops.poptorch.push_name_scope``/``pop_name_scope`` as no-ops, once,
    if torch is imported (``import poptorch`` must not need torch)."""
    torch = sys.modules.get("torch")  # None also where a test blocks torch's import
    if _LIBRARY or torch is None:
        return

    library = torch.library.Library("poptorch", "FRAGMENT")
    library.define("push_name_scope(str name) -> ()")
    library.define("pop_name_scope() -> ()")
    library.impl("push_name_scope", _push_name_scope, "CompositeExplicitAutograd")
    library.impl("pop_name_scope", _pop_name_scope, "CompositeExplicitAutograd")
    library.define("internal_cast(Tensor self, str dtype) -> Tensor")
    library.impl("internal_cast", _internal_cast, "CompositeImplicitAutograd")
    _LIBRARY.append(library)


def _push_name_scope(_name: str) -> None:
    return None


def _pop_name_scope() -> None:
    return None


# PopART's type names, as ``internal_cast`` takes them, and torch's dtypes by name.
_POPART_TYPES = {
    "FLOAT": "float32",
    "FLOAT16": "float16",
    "HALF": "float16",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
}


def _internal_cast(tensor: torch.Tensor, dtype: str) -> torch.Tensor:
    import torch

    name = _POPART_TYPES.get(dtype.upper())
    if name is None:
        raise ValueError(
            f"torch.ops.poptorch.internal_cast(dtype={dtype!r}): pass one of PopART's type "
            f"names {', '.join(_POPART_TYPES)}."
        )
    return tensor.to(getattr(torch, name))


def for_loop(count: int, body: Callable[..., Any], inputs: list[torch.Tensor]) -> list[Any]:
    """``poptorch.for_loop``: ``body`` run ``count`` times on its own outputs (docstring).

    Raises:
        ValueError: ``count`` not an int >= 0, ``inputs`` not a list of tensors, or a body
            whose outputs are not as many as its inputs.
    """
    import torch

    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"poptorch.for_loop(count={count!r}): pass an int >= 0.")
    if not isinstance(inputs, list) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ValueError("poptorch.for_loop(inputs=...): pass a list of tensors, as PopTorch does.")
    values: list[Any] = [t.clone() for t in inputs]  # passed by value, as PopTorch's body
    for _ in range(count):
        out = body(*values)
        out = list(out) if isinstance(out, list | tuple) else [out]
        if len(out) != len(values):
            raise ValueError(
                f"poptorch.for_loop: the body returned {len(out)} tensors for {len(values)} "
                "inputs; return one output for each input."
            )
        values = out
    return values


def _overlap(name: str, tensors: Any, mode: OverlapMode) -> Any:
    if not isinstance(mode, OverlapMode):
        raise ValueError(
            f"poptorch.{name}(mode={mode!r}): pass a poptorch.OverlapMode member, e.g. "
            "poptorch.OverlapMode.OverlapAccumulationLoop."
        )
    return tensors


def set_overlap_for_input(input_tensors: Any, mode: OverlapMode) -> Any:
    """``poptorch.set_overlap_for_input``: the tensors, unchanged (module docstring)."""
    return _overlap("set_overlap_for_input", input_tensors, mode)


def set_overlap_for_output(output_tensors: Any, mode: OverlapMode) -> Any:
    """``poptorch.set_overlap_for_output``: the tensors, unchanged (module docstring)."""
    return _overlap("set_overlap_for_output", output_tensors, mode)


class MultiConv:
    """``with poptorch.MultiConv():``: accepted, no effect (module docstring)."""

    def __init__(self) -> None:
        if "MultiConv" not in _WARNED:
            _WARNED.add("MultiConv")
            warnings.warn(
                "poptorch.MultiConv: accepted, no effect in the emulator (the convolutions "
                "compute the same; the hardware model plans each one on its own)",
                stacklevel=2,
            )

    def _accept(self, *_args: object, **_kwargs: object) -> MultiConv:
        return self

    availableMemoryProportions = partialsTypes = enableConvDithering = _accept  # noqa: N815
    planType = perConvReservedTiles = cycleBackOff = _accept  # noqa: N815

    def __enter__(self) -> MultiConv:
        return self

    def __exit__(self, *_: object) -> None:
        return None


class AsynchronousDataAccessor:
    """``poptorch.AsynchronousDataAccessor(dataset, ...)``: the dataset's batches, in order,
    loaded in the caller (module docstring).

    Raises:
        ValueError: ``rebatched_size`` (rebatching is not modelled).
    """

    def __init__(
        self,
        dataset: Any,
        buffer_size: int = 3,
        miss_sleep_time_in_ms: float = 0.1,
        load_indefinitely: bool = True,
        early_preload: bool = False,
        sharing_strategy: SharingStrategy = SharingStrategy.FileSystem,
        rebatched_size: int | None = None,
    ) -> None:
        if rebatched_size is not None:
            raise ValueError(
                f"poptorch.AsynchronousDataAccessor(rebatched_size={rebatched_size}): not "
                "modelled by popdist-emu; rebatch in the DataLoader (its batch_size) instead."
            )
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.dataset)

    def terminate(self) -> None:
        """Stops PopTorch's loading process: nothing runs in the background here."""
