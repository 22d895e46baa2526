"""PopTorch's model-parallel annotations: ``BeginBlock``, ``Block``, stages and strategies.

First slice: the annotations are accepted and recorded (each module's block name and IPU),
and a model whose blocks all sit on IPU 0 (one IPU per replica) runs as one program, which
is exactly what PopTorch runs for it. Placing blocks on several IPUs (an ``ipu_id`` above 0,
or an execution strategy) is refused in one line until the blocks of the traced program
become :class:`popdist_emu.BlockModel` stages.

References:
    PopTorch User Guide, "Multi-IPU execution strategies" (``poptorch.BeginBlock(module,
    user_id, ipu_id)``, ``poptorch.Block(user_id, ipu_id)``, ``poptorch.Stage``,
    ``poptorch.AutoStage``, ``poptorch.PipelinedExecution``, ``poptorch.ShardedExecution``),
    "Recomputation" (``poptorch.recomputationCheckpoint``) and "Available memory"
    (``poptorch.set_available_memory``).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any

_BLOCK_ATTRIBUTE = "_popdist_emu_block"
_ACTIVE: list[tuple[str | None, int | None]] = []


class AutoStage(enum.Enum):
    """How blocks without an explicit stage are grouped (PopTorch's ``AutoStage``)."""

    SameAsIpu = 0
    AutoIncrement = 1


class Stage:
    """``poptorch.Stage(*block_ids)``: blocks run together; ``ipu(n)`` places them."""

    def __init__(self, *block_ids: str) -> None:
        self.blocks = tuple(block_ids)
        self.ipu_id: int | None = None

    def ipu(self, ipu_id: int) -> Stage:
        """Places the stage on IPU ``ipu_id`` of the replica."""
        self.ipu_id = int(ipu_id)
        return self


class _Strategy:
    """Base of the execution strategies: the stages, in order."""

    def __init__(self, *stages: Any) -> None:
        self.stages = stages


class PipelinedExecution(_Strategy):
    """``poptorch.PipelinedExecution(*stages_or_block_ids)``."""


class ShardedExecution(_Strategy):
    """``poptorch.ShardedExecution(*stages_or_block_ids)``."""


def BeginBlock(  # noqa: N802
    module: Any, user_id: str | None = None, ipu_id: int | None = None
) -> Any:
    """``poptorch.BeginBlock``: a new block starts at ``module`` (returned, annotated)."""
    setattr(module, _BLOCK_ATTRIBUTE, (user_id, ipu_id))
    return module


@contextlib.contextmanager
def Block(user_id: str | None = None, ipu_id: int | None = None) -> Iterator[None]:  # noqa: N802
    """``with poptorch.Block(user_id, ipu_id):``: operations in the body form a block."""
    _check_ipu(f"poptorch.Block({user_id!r}, ipu_id={ipu_id})", ipu_id)
    _ACTIVE.append((user_id, ipu_id))
    try:
        yield
    finally:
        _ACTIVE.pop()


def recomputationCheckpoint(*tensors: Any) -> Any:  # noqa: N802
    """``poptorch.recomputationCheckpoint``: its tensors unchanged (recomputation changes no
    number; its memory effect comes with pipelining)."""
    return tensors[0] if len(tensors) == 1 else tensors


def set_available_memory(tensor: Any, available_memory_proportion: float) -> Any:
    """``poptorch.set_available_memory``: ``tensor`` unchanged (a planner hint)."""
    if not 0.0 < float(available_memory_proportion) <= 1.0:
        raise ValueError(
            f"poptorch.set_available_memory({available_memory_proportion}): the proportion "
            f"must be in (0, 1]."
        )
    return tensor


def _check_ipu(call: str, ipu_id: int | None) -> None:
    if ipu_id not in (None, 0):
        raise ValueError(
            f"{call}: blocks on several IPUs per replica are not supported "
            f"by popdist-emu's PopTorch yet; put every block on IPU 0 (one IPU per replica)."
        )


def check_single_ipu(model: Any, strategy: Any) -> None:
    """Refuses, in one line, a model placed on more than one IPU per replica.

    Args:
        model: the ``torch.nn.Module`` being wrapped.
        strategy: what ``Options.setExecutionStrategy`` set (None: not set).

    Raises:
        ValueError: a block with an ``ipu_id`` above 0, or an execution strategy.
    """
    for name, module in model.named_modules():
        user_id, ipu_id = getattr(module, _BLOCK_ATTRIBUTE, (None, None))
        _check_ipu(f"poptorch.BeginBlock({name or 'model'}, {user_id!r}, ipu_id={ipu_id})", ipu_id)
    if strategy is not None:
        raise ValueError(
            f"setExecutionStrategy({type(strategy).__name__}): pipelined and sharded "
            f"PopTorch models are not supported by popdist-emu yet; run the model on one "
            f"IPU per replica."
        )
