"""PopTorch's model-parallel annotations: ``BeginBlock``, ``Block``, stages and strategies.

A model's blocks are found by tracing its forward once (:func:`tracing_blocks`): every
block it enters, in whichever style, is recorded in the order it runs, and each operation
belongs to the block active when it ran. The styles mix in one model, as PopTorch allows
("You can use any, or a combination, of these three annotation options"):

- ``poptorch.BeginBlock(module, user_id, ipu_id)`` registers a forward pre-hook on the
  module (at once, as PopTorch's hook is, so its place among the module's other hooks is
  PopTorch's); each call of the module begins the block, and operations stay in it until
  the next block begins;
- ``with poptorch.Block(user_id, ipu_id):`` begins the block on entry; on exit no block is
  active (PopTorch does not return to an enclosing block), so operations run before the
  next block begins are refused in one line, as PopTorch refuses them ("No active Block";
  "You must declare all the layers inside a Block scope");
- blocks without a ``user_id`` are named ``"0"``, ``"1"``, ... in the order they begin (a
  ``BeginBlock`` module keeps the id of its first call), counting from 0 at each trace;
  ``poptorch.Block.useAutoId()`` restarts the count, as PopTorch's does;
- entries of one ``user_id`` are one block (PopTorch: "Blocks with the same ID are
  considered as being a single block"); given two different IPUs they are refused;
- operations before the first block run on IPU 0 (PopTorch: "the layers before the first
  BeginBlock will be placed on IPU 0"): in the first block where it is on IPU 0, else in a
  block of their own there (``_stages``).

Strategies and stages are mapped onto the emulator's in ``_stages``; the traced program is
cut into :class:`popdist_emu.BlockModel` blocks in ``_split``.

Decisions (PopTorch's user guide is silent): a module passed to ``BeginBlock`` twice is
refused naming both blocks, as PopTorch's ``BeginBlock`` refuses it ("module has already
been assigned to a block"); automatic ids count from 0 at every trace (PopTorch traces a
model once); a block entered in two separate parts of the forward (another block between)
is refused by ``_split``: PopTorch makes one block of them, the emulator's stages need each
block contiguous.

References:
    PopTorch User Guide, "Multi-IPU execution strategies" / "Annotations"
    (``poptorch.BeginBlock(module, user_id, ipu_id)``, ``poptorch.Block(user_id, ipu_id)``,
    ``poptorch.Block.useAutoId``, ``poptorch.Stage``, ``poptorch.AutoStage``,
    ``poptorch.PipelinedExecution``, ``poptorch.ShardedExecution``, ``poptorch.removeBlocks``),
    "Available memory"
    (``poptorch.set_available_memory``); PopTorch's API reference, ``poptorch.Block``
    (github.com/graphcore/poptorch, ``python/ops.py`` docstrings).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

_BLOCK_ATTRIBUTE = "_popdist_emu_block"
_Module = TypeVar("_Module", bound="torch.nn.Module")
SCOPE = "popdist_emu_block"  # the name scope of block k is f"{SCOPE}{k}"
NO_BLOCK = "popdist_emu_no_block"  # after the k-th Block context ended: f"{NO_BLOCK}{k}"


class AutoStage(enum.Enum):
    """How ``PipelinedExecution(AutoStage.X)`` makes stages of the blocks (PopTorch's
    ``AutoStage``): ``SameAsIpu``, a stage per IPU; ``AutoIncrement``, a stage per block."""

    SameAsIpu = 0
    AutoIncrement = 1


class Stage:
    """``poptorch.Stage(*block_ids)``: blocks run together; ``ipu(n)`` places them.

    Raises:
        ValueError: a block id that is not a string (PopTorch's ids are strings; an
            automatic id is ``"0"``, not ``0``).
    """

    def __init__(self, *block_ids: str) -> None:
        for block in block_ids:
            if not isinstance(block, str):
                raise ValueError(
                    f"poptorch.Stage({block!r}): block ids are strings (automatic ids too): "
                    f"write poptorch.Stage({str(block)!r})."
                )
        self.blocks = tuple(block_ids)
        self.ipu_id: int | None = None

    def ipu(self, ipu_id: int) -> Stage:
        """Places the stage on IPU ``ipu_id`` of the replica."""
        self.ipu_id = int(ipu_id)
        return self


class _Strategy:
    """Base of the execution strategies: the stages, in order."""

    def __init__(self, *stages: Stage | str | list[str] | tuple[str, ...] | AutoStage) -> None:
        self.stages = stages


class PipelinedExecution(_Strategy):
    """``poptorch.PipelinedExecution(*stages_or_block_ids)``."""


class ShardedExecution(_Strategy):
    """``poptorch.ShardedExecution(*stages_or_block_ids)``."""


@dataclasses.dataclass
class BlockTrace:
    """The blocks one trace of the forward enters, in order, and the scope switch.

    Attributes:
        begin: switches the ``jax.named_scope`` of the operations that follow (``_split``'s
            ``block_scopes``).
        names: each block's name, in the order first entered; its scope is
            ``f"{SCOPE}{k}"`` for the block at index k.
        ipus: each block's IPU (the first given; None if never given).
        ended: for the k-th ``with poptorch.Block`` that ended, its name and the block
            context still open around it (None at the top).
        refused: why the blocks cannot be (one line each), raised once the trace is done
            (an error raised inside the trace would reach the program with JAX's notes).
    """

    begin: Callable[[str], None]
    names: list[str] = dataclasses.field(default_factory=list)
    ipus: dict[str, int | None] = dataclasses.field(default_factory=dict)
    ended: list[tuple[str, str | None]] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)
    _auto: int = 0
    _hooks: dict[int, str] = dataclasses.field(default_factory=dict)
    _open: list[str] = dataclasses.field(default_factory=list)

    def enter(self, user_id: str | None, ipu_id: int | None, hook: object = None) -> str:
        """Begins block ``user_id`` (None: the next automatic id; a BeginBlock ``hook``
        keeps its first) and returns its name."""
        if not user_id and hook is not None and id(hook) in self._hooks:
            name = self._hooks[id(hook)]
        elif not user_id:  # PopTorch: ``user_id or nextAutoId()``
            name, self._auto = str(self._auto), self._auto + 1
            if hook is not None:
                self._hooks[id(hook)] = name
        else:
            name = str(user_id)
        try:
            ipu = ipu_index(name, ipu_id)
        except ValueError as error:
            self.refused.append(str(error))
            ipu = None
        if name not in self.ipus:
            self.names.append(name)
            self.ipus[name] = ipu
        elif ipu is not None and self.ipus[name] not in (None, ipu):
            self.refused.append(
                f"block {name!r} is entered on IPU {self.ipus[name]} and again on IPU {ipu}; "
                "entries with one id are one block, which runs on one IPU: give them the "
                "same ipu_id, or different ids."
            )
        elif ipu is not None:
            self.ipus[name] = ipu
        self.begin(f"{SCOPE}{self.names.index(name)}")
        return name

    def open(self, name: str) -> None:
        """A ``with poptorch.Block`` context named ``name`` was entered."""
        self._open.append(name)

    def close(self) -> None:
        """The innermost ``with poptorch.Block`` ended: no block is active until the next."""
        name = self._open.pop()
        self.ended.append((name, self._open[-1] if self._open else None))
        self.begin(f"{NO_BLOCK}{len(self.ended) - 1}")

    def restart_ids(self) -> None:
        """``poptorch.Block.useAutoId()``: automatic ids count from 0 again."""
        self._auto = 0


_TRACES: list[BlockTrace] = []  # the trace in progress (innermost last)


def ipu_index(block: str | None, ipu_id: object) -> int | None:
    """``ipu_id`` as an IPU index (None: not given).

    Raises:
        ValueError: neither None nor a whole number from 0.
    """
    if ipu_id is None:
        return None
    try:
        ipu = int(ipu_id)  # type: ignore[call-overload]  # any int-like, as PopTorch's
    except (TypeError, ValueError):
        ipu = -1
    if ipu < 0 or ipu != ipu_id:
        raise ValueError(
            f"block {block!r}: ipu_id={ipu_id!r} is not an IPU index: give a whole number from "
            "0 (the replica's first IPU), or None."
        )
    return ipu


@contextlib.contextmanager
def tracing_blocks(begin: Callable[[str], None]) -> Iterator[BlockTrace]:
    """Records the blocks the body's trace enters; ``begin`` switches the name scope."""
    trace = BlockTrace(begin)
    _TRACES.append(trace)
    try:
        yield trace
    finally:
        _TRACES.pop()


class _BlockHook:
    """BeginBlock's forward pre-hook: begins the block while a forward is traced; returns
    None (a hook's other results would replace the module's inputs)."""

    def __init__(self, user_id: str | None, ipu_id: int | None) -> None:
        self.user_id, self.ipu_id = user_id, ipu_id

    def __call__(self, *_: object) -> None:
        if _TRACES:
            _TRACES[-1].enter(self.user_id, self.ipu_id, hook=self)


def BeginBlock(  # noqa: N802
    layer_to_call: _Module, user_id: str | None = None, ipu_id: int | None = None
) -> _Module:
    """``poptorch.BeginBlock``: a block starts at each call of ``layer_to_call`` (returned).

    The first parameter has PopTorch's name, so a program may pass it by keyword, as
    Graphcore's CNNs do (``BeginBlock(ipu_id=..., layer_to_call=...)`` in graphcore/examples
    ``vision/cnns/pytorch/models/models.py``).

    Raises:
        ValueError: ``layer_to_call`` is not a ``torch.nn.Module``, or already begins a block.
    """
    module = layer_to_call
    if not hasattr(module, "register_forward_pre_hook"):
        raise ValueError(
            f"poptorch.BeginBlock({module!r}, {user_id!r}): pass a torch.nn.Module (a block "
            "begins at its forward); around other code write `with poptorch.Block(...):`."
        )
    before = getattr(module, _BLOCK_ATTRIBUTE, None)
    if before is not None:
        raise ValueError(
            f"poptorch.BeginBlock({type(module).__name__}, {user_id!r}): the module already "
            f"begins block {before[0]!r} (ipu_id {before[1]}); a module begins one block: "
            "annotate it once, or wrap it in a module of its own."
        )
    ipu_index(user_id, ipu_id)
    setattr(module, _BLOCK_ATTRIBUTE, (user_id, ipu_id))
    module.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return module


def removeBlocks(module: torch.nn.Module) -> None:  # noqa: N802
    """``poptorch.removeBlocks(module)``: undoes every ``BeginBlock`` in ``module``'s tree.

    Each annotated submodule loses its pre-hook and its mark, so it can be annotated again
    (Graphcore's SQuAD ``deparallelize`` re-blocks a pretrained model this way); ``with
    poptorch.Block`` contexts in a ``forward`` are code, not annotations, and stay.
    """
    for submodule in module.modules():
        if getattr(submodule, _BLOCK_ATTRIBUTE, None) is None:
            continue
        delattr(submodule, _BLOCK_ATTRIBUTE)
        hooks = submodule._forward_pre_hooks
        for key in [k for k, hook in hooks.items() if isinstance(hook, _BlockHook)]:
            del hooks[key]


class Block:
    """``with poptorch.Block(user_id, ipu_id):``: operations in the body form a block.

    Outside a traced training forward (eager PyTorch, inference) it changes nothing.
    """

    def __init__(self, user_id: str | None = None, ipu_id: int | None = None) -> None:
        self.user_id, self.ipu_id = user_id, ipu_id

    @staticmethod
    def useAutoId() -> None:  # noqa: N802
        """Restarts automatic block ids at ``"0"`` (call it at the start of ``forward``)."""
        if _TRACES:
            _TRACES[-1].restart_ids()

    @staticmethod
    def start(user_id: str | None = None, ipu_id: int | None = None) -> None:
        """``poptorch.Block.start``: begins a block that lasts until the next one begins."""
        if _TRACES:
            _TRACES[-1].enter(user_id, ipu_id)

    def __enter__(self) -> None:
        if _TRACES:
            _TRACES[-1].open(_TRACES[-1].enter(self.user_id, self.ipu_id))

    def __exit__(self, *_: Any) -> None:
        if _TRACES:
            _TRACES[-1].close()


def set_available_memory(tensor: torch.Tensor, available_memory_proportion: float) -> torch.Tensor:
    """``poptorch.set_available_memory``: ``tensor`` unchanged (a planner hint)."""
    if not 0.0 < float(available_memory_proportion) <= 1.0:
        raise ValueError(
            f"poptorch.set_available_memory({available_memory_proportion}): the proportion "
            f"must be in (0, 1]."
        )
    return tensor


def check_strategy(strategy: object) -> None:
    """Refuses what ``setExecutionStrategy`` was given unless it is PopTorch's strategy."""
    if strategy is not None and not isinstance(strategy, _Strategy):
        raise ValueError(
            f"setExecutionStrategy({strategy!r}): pass poptorch.PipelinedExecution(...) or "
            f"poptorch.ShardedExecution(...)."
        )
