"""PopTorch calls with an obvious meaning here: accepted, each named once in a note.

- ``poptorch.ipu_print_tensor(tensor, title="", ...)``: on an IPU, an identity operation
  that prints the tensor (and by default its gradient) each time the program runs it. The
  emulator returns the tensor unchanged and prints nothing from inside the compiled step (a
  print per micro-batch would bury the program's own output): one note per title says so,
  and the program can print the tensor it returns.
- ``poptorch.nop(tensor)``: PopTorch's no-operation, an identity the compiler keeps (used to
  stop an optimisation); the emulator's compiler has nothing to keep it from, so it is the
  identity, noted once.
- ``poptorch.ConnectionType`` (``Always``, ``OnDemand``, ``Never``) for
  ``opts.connectionType(...)``: when PopTorch attaches to the IPUs. The emulator attaches to
  none, so the option is accepted with the no-effect note of ``poptorch.Options``.

References:
    PopTorch User Guide, "Reference" (``poptorch.ipu_print_tensor``, ``poptorch.nop``,
    ``poptorch.ConnectionType``, ``poptorch.Options.connectionType``) and "Debugging your
    model" (printing tensors).
"""

from __future__ import annotations

import enum
import warnings
from typing import TypeVar

_T = TypeVar("_T")
_NOTED: set[str] = set()


class ConnectionType(enum.IntEnum):
    """When PopTorch attaches to the IPUs (``opts.connectionType``): no effect here."""

    Always = 0
    OnDemand = 1
    Never = 2


def _note_once(key: str, text: str) -> None:
    if key not in _NOTED:
        _NOTED.add(key)
        warnings.warn(text, stacklevel=3)


def ipu_print_tensor(
    tensor: _T,
    title: str = "",
    print_gradient: bool = True,
    summarise_threshold: int = 1000,
    edge_items: int = 3,
    linewidth: int = 75,
) -> _T:
    """``poptorch.ipu_print_tensor``: ``tensor`` unchanged, named once (module docstring).

    The formatting arguments are PopTorch's and are accepted as given.
    """
    del print_gradient, summarise_threshold, edge_items, linewidth
    _note_once(
        f"ipu_print_tensor:{title}",
        f"poptorch.ipu_print_tensor({title!r}): the IPU would print this tensor each time the "
        "program runs; popdist-emu returns it unchanged and prints nothing from inside the "
        "compiled step (print the returned tensor on the host to see it)",
    )
    return tensor


def nop(tensor: _T) -> _T:
    """``poptorch.nop``: the identity, named once (module docstring)."""
    _note_once(
        "nop",
        "poptorch.nop: the identity in popdist-emu (it only stops Poplar's compiler from "
        "optimising across it, which changes no number)",
    )
    return tensor
