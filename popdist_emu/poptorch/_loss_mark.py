"""Which output of a forward is the loss: the tensor ``poptorch.identity_loss`` returned.

PopTorch minimises the tensor ``identity_loss`` marks, wherever the forward returns it among
its outputs: Graphcore's BERT returns ``(total_loss, mlm_loss, nsp_loss, mlm_acc, nsp_acc)``
and GPT-2 ``(loss, acc)``, the marked loss first and accuracies (which have no gradient)
after it. Without ``identity_loss`` PopTorch takes the loss function's output; the programs
that return it with other outputs return it last (the tutorials' ``return output, loss``),
which is the output the emulator takes then.

The forward is traced once per program; while it runs, :func:`marking_losses` collects the
tensors ``identity_loss`` returns, and :func:`note_loss_position` records where the marked
one sits in the outputs, for :func:`the_loss` to pick in the same trace.

References:
    PopTorch User Guide, "poptorch.identity_loss" (marks a tensor as the loss to minimise)
    and "Training" (the model returns its loss, alone or with other outputs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_MARKING: list[list[object]] = []  # one list per forward being traced
_POSITION: list[int | None] = [None]  # the last traced forward's loss position


@contextlib.contextmanager
def marking_losses() -> Iterator[list[object]]:
    """Collects the tensors ``identity_loss`` returns while the block runs."""
    marked: list[object] = []
    _MARKING.append(marked)
    try:
        yield marked
    finally:
        _MARKING.pop()


def mark(tensor: Any) -> Any:
    """``tensor``, noted as a loss when a forward is being traced."""
    if _MARKING:
        _MARKING[-1].append(tensor)
    return tensor


def note_loss_position(out: Any, marked: list[object]) -> None:
    """Records which of the forward's outputs ``out`` is a marked loss (None: none is)."""
    position = None
    if isinstance(out, tuple | list):
        hits = (i for i, o in enumerate(out) if any(o is m for m in marked))
        position = next(hits, None)
    _POSITION[0] = position


def the_loss(out: Any) -> Any:
    """The loss among the outputs of the forward traced last: the marked one, else the
    last output (or the only one)."""
    if not isinstance(out, tuple | list):
        return out
    position = _POSITION[0]
    return out[-1] if position is None or position >= len(out) else out[position]
