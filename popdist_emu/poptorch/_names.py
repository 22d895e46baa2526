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
  PyTorch and under torchax's tracing, once torch is imported with ``poptorch``.

References:
    PopTorch User Guide, "Reference" (``poptorch.serializedMatMul``,
    ``poptorch.MatMulSerializationMode``, ``poptorch.setLogLevel``, ``poptorch.Attribute``)
    and "Environment variables" (``POPTORCH_LOG_LEVEL``); graphcore/examples
    ``nlp/bert/pytorch/modeling.py`` (``SerializedLinear``, ``outline_attribute``),
    ``vision/cnns/pytorch/models/models.py`` (``name_scope_hook``); PyTorch documentation,
    ``torch.library.Library`` (``define``, ``impl``).
"""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING, Any

from popdist_emu.poptorch._api import MatMulSerializationMode

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
    _LIBRARY.append(library)


def _push_name_scope(_name: str) -> None:
    return None


def _pop_name_scope() -> None:
    return None
