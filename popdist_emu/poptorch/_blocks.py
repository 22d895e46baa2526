"""PopTorch's model-parallel annotations: ``BeginBlock``, ``Block``, stages and strategies.

``BeginBlock`` annotates a module; when a training model has an execution strategy or a
block on an IPU above 0, the forward is traced with each block's name scope (the module's
forward pre-hook switches it) and cut into :class:`popdist_emu.BlockModel` blocks
(``_split``), run by the emulator's ``PipelinedExecution``/``ShardedExecution``. Without a
strategy PopTorch's default applies: pipelined, one stage per run of blocks on one IPU.
``with poptorch.Block(name, ipu_id):`` switches the block the same way while it is entered;
such blocks are found by tracing the forward once (:func:`recording_blocks`), in the order
they run.

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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar, cast, overload

if TYPE_CHECKING:
    import torch

    import popdist_emu

_BLOCK_ATTRIBUTE = "_popdist_emu_block"
_ACTIVE: list[tuple[str | None, int | None]] = []
_Module = TypeVar("_Module", bound="torch.nn.Module")


class AutoStage(enum.Enum):
    """How ``PipelinedExecution(AutoStage.X)`` makes stages of the blocks (PopTorch's
    ``AutoStage``): ``SameAsIpu``, a stage per IPU; ``AutoIncrement``, a stage per block."""

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

    def __init__(self, *stages: Stage | str | AutoStage) -> None:
        self.stages = stages


class PipelinedExecution(_Strategy):
    """``poptorch.PipelinedExecution(*stages_or_block_ids)``."""


class ShardedExecution(_Strategy):
    """``poptorch.ShardedExecution(*stages_or_block_ids)``."""


def BeginBlock(  # noqa: N802
    module: _Module, user_id: str | None = None, ipu_id: int | None = None
) -> _Module:
    """``poptorch.BeginBlock``: a new block starts at ``module`` (returned, annotated)."""
    setattr(module, _BLOCK_ATTRIBUTE, (user_id, ipu_id))
    return module


@contextlib.contextmanager
def Block(user_id: str | None = None, ipu_id: int | None = None) -> Iterator[None]:  # noqa: N802
    """``with poptorch.Block(user_id, ipu_id):``: operations in the body form a block.

    Operations after the body stay in it until the next block begins, as after a
    ``BeginBlock``. A block without a name is named by its place among the blocks entered.
    """
    name = user_id or f"block{len(_RECORD[-1]) if _RECORD else 0}"
    if _RECORD:
        _RECORD[-1].append((name, None if ipu_id is None else int(ipu_id)))
    if _SWITCH:
        _SWITCH[-1](name)
    _ACTIVE.append((user_id, ipu_id))
    try:
        yield
    finally:
        _ACTIVE.pop()


_RECORD: list[list[tuple[str, int | None]]] = []  # blocks entered while recording


@contextlib.contextmanager
def recording_blocks() -> Iterator[list[tuple[str, int | None]]]:
    """The ``(name, ipu_id)`` of the ``poptorch.Block`` contexts entered in the body, each
    once, in the order first entered (an IPU given on any entry is kept)."""
    entered: list[tuple[str, int | None]] = []
    _RECORD.append(entered)
    found: list[tuple[str, int | None]] = []
    try:
        yield found
    finally:
        _RECORD.pop()
        ipus: dict[str, int | None] = {}
        for name, ipu in entered:
            if ipus.get(name) is None:
                ipus[name] = ipu
        found.extend(ipus.items())


@overload
def recomputationCheckpoint(tensor: torch.Tensor, /) -> torch.Tensor: ...


@overload
def recomputationCheckpoint(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]: ...


def recomputationCheckpoint(*tensors: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:  # noqa: N802
    """``poptorch.recomputationCheckpoint``: its tensors unchanged (recomputation changes no
    number; its memory effect comes with pipelining): one tensor as itself, several as a
    tuple."""
    return tensors[0] if len(tensors) == 1 else tensors


def set_available_memory(tensor: torch.Tensor, available_memory_proportion: float) -> torch.Tensor:
    """``poptorch.set_available_memory``: ``tensor`` unchanged (a planner hint)."""
    if not 0.0 < float(available_memory_proportion) <= 1.0:
        raise ValueError(
            f"poptorch.set_available_memory({available_memory_proportion}): the proportion "
            f"must be in (0, 1]."
        )
    return tensor


_SWITCH: list[Callable[[str], None]] = []  # the active block_scopes switch while a model is traced


def block_names(model: torch.nn.Module) -> list[tuple[str, int | None]]:
    """``(name, ipu_id)`` of every ``BeginBlock`` in module order; hooks switch the scope.

    Each annotated module gets a forward pre-hook (once) that, while a model is traced under
    :func:`tracing_blocks`, closes the active block's name scope and opens its own.
    """
    found = []
    for k, (_, module) in enumerate(model.named_modules()):
        annotation = getattr(module, _BLOCK_ATTRIBUTE, None)
        if annotation is None:
            continue
        user_id, ipu_id = annotation
        name = user_id or f"block{k}"
        if not getattr(module, "_popdist_emu_hooked", False):
            module.register_forward_pre_hook(_switch_hook(name))
            setattr(module, "_popdist_emu_hooked", True)  # noqa: B010 (not a Tensor/Module)
        found.append((name, ipu_id))
    return found


def _switch_hook(name: str) -> Callable[..., None]:
    """A forward pre-hook entering block ``name`` while tracing; it returns None (a hook's
    non-None result would replace the module's inputs)."""

    def hook(*_: object) -> None:
        if _SWITCH:
            _SWITCH[-1](name)

    return hook


@contextlib.contextmanager
def tracing_blocks(begin: Callable[[str], None]) -> Iterator[None]:
    """Makes ``begin`` (a ``block_scopes`` switch) the one BeginBlock's hooks call."""
    _SWITCH.append(begin)
    try:
        yield
    finally:
        _SWITCH.pop()


def check_strategy(strategy: object) -> None:
    """Refuses what ``setExecutionStrategy`` was given unless it is PopTorch's strategy."""
    if strategy is not None and not isinstance(strategy, _Strategy):
        raise ValueError(
            f"setExecutionStrategy({strategy!r}): pass poptorch.PipelinedExecution(...) or "
            f"poptorch.ShardedExecution(...)."
        )


def emulator_strategy(
    strategy: object, blocks: list[tuple[str, int | None]]
) -> popdist_emu.PipelinedExecution | popdist_emu.ShardedExecution:
    """The ``popdist_emu`` strategy for PopTorch's (None: the blocks' IPUs, pipelined).

    Args:
        strategy: ``poptorch.PipelinedExecution``/``ShardedExecution`` or None.
        blocks: ``(name, ipu_id)`` of the model's blocks, in order.

    Returns:
        ``popdist_emu.PipelinedExecution`` or ``ShardedExecution`` of ``popdist_emu.Stage``s.
    """
    import popdist_emu

    if not blocks:
        raise ValueError(
            "setExecutionStrategy: the model has no blocks; annotate its parts with "
            "poptorch.BeginBlock(module, name) or `with poptorch.Block(name):`."
        )
    if strategy is None:  # PopTorch's default: pipelined, one stage per run of one IPU
        runs = _runs_by_ipu([(name, ipu or 0) for name, ipu in blocks])
        return popdist_emu.PipelinedExecution(
            *(popdist_emu.Stage(*names, ipu=ipu) for ipu, names in runs)
        )
    check_strategy(strategy)
    assert isinstance(strategy, _Strategy)  # check_strategy refused anything else
    cls = (
        popdist_emu.ShardedExecution
        if isinstance(strategy, ShardedExecution)
        else popdist_emu.PipelinedExecution
    )
    if len(strategy.stages) == 1 and isinstance(strategy.stages[0], AutoStage):
        return cls(*_auto_stages(strategy, blocks))
    ipu_of = dict(blocks)
    emu = []
    for stage in strategy.stages:
        if isinstance(stage, Stage):
            emu.append(popdist_emu.Stage(*stage.blocks, ipu=stage.ipu_id))
        else:
            emu.append(popdist_emu.Stage(str(stage), ipu=ipu_of.get(str(stage))))
    return cls(*emu)


def _auto_stages(
    strategy: _Strategy, blocks: list[tuple[str, int | None]]
) -> list[popdist_emu.Stage]:
    """The stages ``PipelinedExecution(AutoStage.X)`` (or sharded) makes of the blocks, each
    placed by its ``ipu_id``: ``AutoIncrement``, a stage per block, in the order they run
    (blocks on one IPU become stages of their own on it); ``SameAsIpu``, stage k holds the
    blocks on IPU k, which must then run one after the other.

    Raises:
        ValueError: a block without an ``ipu_id``, or ``SameAsIpu`` blocks on one IPU that
            another IPU's block separates.
    """
    import popdist_emu

    auto, name = cast(AutoStage, strategy.stages[0]), type(strategy).__name__
    missing = [block for block, ipu in blocks if ipu is None]
    if missing:
        raise ValueError(
            f"{name}(AutoStage.{auto.name}): block {missing[0]!r} has no ipu_id; AutoStage "
            "places each block by its ipu_id: give BeginBlock/Block an ipu_id, or list the "
            "stages as poptorch.Stage(...).ipu(n)."
        )
    if auto is AutoStage.AutoIncrement:
        return [popdist_emu.Stage(block, ipu=ipu) for block, ipu in blocks]
    runs = _runs_by_ipu([(block, int(ipu)) for block, ipu in blocks if ipu is not None])
    for i, (ipu, names) in enumerate(runs):
        if any(earlier == ipu for earlier, _ in runs[:i]):
            before_ipu, before = runs[i - 1]
            raise ValueError(
                f"{name}(AutoStage.SameAsIpu): block {names[0]!r} returns to IPU {ipu} after "
                f"block {before[-1]!r} on IPU {before_ipu}, but a stage must be one "
                "run of blocks: use AutoStage.AutoIncrement (a stage per block)."
            )
    return [popdist_emu.Stage(*names, ipu=ipu) for ipu, names in runs]


def _runs_by_ipu(blocks: list[tuple[str, int]]) -> list[tuple[int, list[str]]]:
    """``(ipu, block names)`` of each run of consecutive blocks on one IPU, in order."""
    runs: list[tuple[int, list[str]]] = []
    for block, ipu in blocks:
        if runs and runs[-1][0] == ipu:
            runs[-1][1].append(block)
        else:
            runs.append((ipu, [block]))
    return runs
