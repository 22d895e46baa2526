"""Which of a forward's outputs is the loss: the one ``poptorch.identity_loss`` returned.

PopTorch builds the training graph's loss from the tensor ``identity_loss`` marks (or a torch
loss function's result), wherever the forward puts it among its outputs: Graphcore's CNN
training wrapper returns ``(identity_loss(sum(losses), reduction="none"), losses,
metrics)``, the loss first and the accuracy last. Without a mark the loss is the forward's
only output or its last one (the tutorials' ``return output, loss``).

The forward is traced as a torch function (``_buffers.module_function``); while it runs,
:func:`mark` records what ``identity_loss`` returns and :func:`traced_forward` finds it among
the outputs by identity, recording where it sits (a path of tuple indices and dict keys). The
structure of the outputs is the same once they are JAX arrays, so :func:`pick_loss` follows
that path in them. The path of the forward traced last is the one used: the loss function
runs the forward's Python, then picks, in the same call.

References:
    PopTorch User Guide, "poptorch.identity_loss" (marks the loss; "none" leaves the tensor
    as it is) and "Model wrapping functions" (a training model's loss).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Path = tuple[int | str, ...]

_marked: list[torch.Tensor] = []  # identity_loss results of the forward being traced
_tracing = [False]  # whether a forward is being traced (outside, marks are not kept)
_last_path: list[Path | None] = [None]  # where the last traced forward put its loss


def mark(loss: torch.Tensor) -> torch.Tensor:
    """Records ``loss`` (what ``identity_loss`` returns) while a forward is traced."""
    if _tracing[0]:
        _marked.append(loss)
    return loss


def _find(out: Any, target: torch.Tensor, path: Path) -> Path | None:
    if out is target:
        return path
    if isinstance(out, tuple | list):
        for i, item in enumerate(out):
            found = _find(item, target, (*path, i))
            if found is not None:
                return found
    if isinstance(out, dict):
        for key, item in out.items():
            found = _find(item, target, (*path, key))
            if found is not None:
                return found
    return None


def traced_forward(forward: Callable[[], Any]) -> Any:
    """Runs ``forward`` (a torch forward being traced) and records where, among its outputs,
    the last tensor ``identity_loss`` marked sits (None where none is among them)."""
    _marked.clear()
    _tracing[0] = True
    try:
        out = forward()
    finally:
        _tracing[0] = False
    path = None
    for loss in reversed(_marked):
        path = _find(out, loss, ())
        if path is not None:
            break
    _marked.clear()
    _last_path[0] = path
    return out


def pick_loss(out: Any) -> Any:
    """The loss among the outputs (JAX arrays) of the forward traced last: the marked
    output, else the only output, else the last; one element of any shape is the scalar
    PopTorch takes it for (ViT's mixup loss has shape ``[1]``)."""
    path = _last_path[0]
    if path is not None:
        for key in path:
            out = out[key]
    elif isinstance(out, tuple | list):
        out = out[-1]
    if getattr(out, "ndim", 0) and getattr(out, "size", 0) == 1:
        return out.reshape(())
    return out
