"""A PopTorch model's blocks, found by one trace, and the emulator's stages made of them.

:func:`blocked_loss` traces the loss once with every block's name scope (``_blocks``
records ``BeginBlock`` switches and ``poptorch.Block`` contexts alike, in the order they
run), refuses operations that belong to no block, places the operations before the first block
on IPU 0 (PopTorch: "the layers before the first BeginBlock will be placed on IPU 0"),
maps PopTorch's strategy onto the
emulator's (:func:`emulator_strategy`) and cuts the trace into a
:class:`popdist_emu.BlockModel` (``_split``).

PopTorch's rules for stages, refused in one line naming the block and the fix: a block in
no stage ("Unknown Block ... list of expected Blocks"), a block in two stages ("associated
with more than one stage"), ``AutoStage.SameAsIpu`` with a block that has no IPU. The
emulator also refuses a stage naming a block the model never runs (PopTorch would build an
empty stage of it), and a stage without ``.ipu(n)`` whose blocks were given different IPUs
(PopTorch would place the stage's operations on both).

References:
    PopTorch User Guide, "Multi-IPU execution strategies" (``poptorch.Stage``: "a stage
    consists of one or more blocks ... identified by their user_id"; a block's ``ipu_id``
    holds "unless overridden by a Stage"; ``poptorch.AutoStage``; ``PipelinedExecution()``
    defaults to ``AutoStage.SameAsIpu``); PopTorch's API reference,
    ``poptorch.PipelinedExecution`` (stages given as a ``Stage``, a block id or a list of
    block ids).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jax
from jax.extend import core as jcore

import popdist_emu
from popdist_emu._jaxpr_run import without_names
from popdist_emu.poptorch._blocks import (
    NO_BLOCK,
    SCOPE,
    AutoStage,
    BlockTrace,
    ShardedExecution,
    Stage,
    _Strategy,
    check_strategy,
    tracing_blocks,
)
from popdist_emu.poptorch._placement import PIPELINE, RECOMPUTE_ALL, placed_options
from popdist_emu.poptorch._recompute import marking_checkpoints
from popdist_emu.poptorch._split import block_scopes, cut_blocks

_EmuStrategy = popdist_emu.PipelinedExecution | popdist_emu.ShardedExecution
# The block of the operations before the first block begins, where that block is on another
# IPU: PopTorch places them on IPU 0.
BEFORE_FIRST_BLOCK = "(before the first block)"


def blocked_loss(
    loss: Callable[[Any, Any], jax.Array],
    params: Mapping[str, jax.Array | jax.ShapeDtypeStruct],
    micro_batch: Any,
    strategy: object,
    *,
    mark_checkpoints: bool = False,
    recomputes: Callable[[_EmuStrategy], bool] = lambda _: False,
) -> tuple[_EmuStrategy | None, popdist_emu.BlockModel | None]:
    """The emulator's strategy and the loss cut into its blocks (None, None: one program,
    for a model without a strategy whose blocks all stay on IPU 0).

    Args:
        loss: ``loss(params, micro_batch)``, the torch module's forward on JAX.
        params: the trained weights by name (arrays or shapes).
        micro_batch: one micro-batch of one replica (arrays or shapes).
        strategy: ``poptorch.PipelinedExecution``/``ShardedExecution`` or None.
        mark_checkpoints: name ``recomputationCheckpoint``'s tensors in the trace (a
            pipeline that recomputes stashes them and recomputes between them).
        recomputes: whether the stages made recompute; the names are taken out where not.

    Raises:
        ValueError: an operation after a ``with poptorch.Block`` ended and before the
            next block began, one block id on two IPUs, or stages the blocks cannot make.
    """
    marking = marking_checkpoints() if mark_checkpoints else contextlib.nullcontext()
    with block_scopes() as begin, tracing_blocks(begin) as trace, marking:
        closed = jax.make_jaxpr(loss)(params, micro_batch)
    if trace.refused:
        raise ValueError(trace.refused[0])
    _check_active_block(closed, trace)
    blocks = [(name, trace.ipus[name]) for name in trace.names]
    if strategy is None and not any(ipu for _, ipu in blocks):
        return None, None
    scopes = [f"{SCOPE}{k}" for k in range(len(blocks))]
    names = list(trace.names)
    if blocks and blocks[0][1] and _runs_before_first_block(closed, scopes):
        # PopTorch: "the layers before the first BeginBlock will be placed on IPU 0";
        # with a first block on another IPU they are a block of their own there.
        blocks.insert(0, (BEFORE_FIRST_BLOCK, 0))
        scopes.insert(0, f"{SCOPE}before")
        names.insert(0, BEFORE_FIRST_BLOCK)
    emulated = emulator_strategy(strategy, blocks)
    if mark_checkpoints and not recomputes(emulated):
        closed = without_names(closed)
    return emulated, cut_blocks(closed, params, scopes, names)


def placed_blocks(
    loss: Callable[[Any, Any], jax.Array],
    params: Mapping[str, jax.Array | jax.ShapeDtypeStruct],
    micro_batch: Any,
    fields: popdist_emu.Options,
    auto_recomputation: int | None,
) -> tuple[_EmuStrategy | None, popdist_emu.BlockModel | None, popdist_emu.Options | None]:
    """:func:`blocked_loss` of the program's strategy, and the options its stages run with
    (``_placement.placed_options``; None with the loss where no stages are made).

    ``recomputationCheckpoint``'s tensors are named in the trace where the pipeline
    recomputes (PopART then stashes them and recomputes between them:
    ``programs.checkpoint_segments``), and the names are taken out where it does not: a named
    copy would count as a second saved activation.
    """

    def recomputes(emulated: _EmuStrategy) -> bool:
        return placed_options(fields, emulated, auto_recomputation).recomputation

    emulated, blocked = blocked_loss(
        loss,
        params,
        micro_batch,
        fields.execution_strategy,
        mark_checkpoints=auto_recomputation in (None, PIPELINE, RECOMPUTE_ALL),
        recomputes=recomputes,
    )
    if blocked is None or emulated is None:
        return emulated, None, None
    return emulated, blocked, placed_options(fields, emulated, auto_recomputation)


def _runs_before_first_block(closed: jcore.ClosedJaxpr, scopes: list[str]) -> bool:
    """Whether an operation runs before the first block begins."""
    for eqn in closed.jaxpr.eqns:
        head = str(eqn.source_info.name_stack).split("/", 1)[0]
        return head not in scopes
    return False


def _check_active_block(closed: jcore.ClosedJaxpr, trace: BlockTrace) -> None:
    """Refuses an operation traced while no block was active (after a Block ended)."""
    for eqn in closed.jaxpr.eqns:
        head = str(eqn.source_info.name_stack).split("/", 1)[0]
        if head.startswith(NO_BLOCK):
            name, outer = trace.ended[int(head[len(NO_BLOCK) :])]
            inside = f" (PopTorch does not return to the enclosing block {outer!r})"
            raise ValueError(
                f"an operation ({eqn.primitive.name}) runs after `with poptorch.Block"
                f"({name!r}):` ended, in no block{inside if outer else ''}; PopTorch refuses "
                "it ('No active Block'): put it inside a `with poptorch.Block(...):`."
            )


def emulator_strategy(strategy: object, blocks: list[tuple[str, int | None]]) -> _EmuStrategy:
    """The ``popdist_emu`` strategy for PopTorch's (None: the blocks' IPUs, pipelined).

    Args:
        strategy: ``poptorch.PipelinedExecution``/``ShardedExecution`` or None.
        blocks: ``(name, ipu_id)`` of the model's blocks, in the order they run.

    Returns:
        ``popdist_emu.PipelinedExecution`` or ``ShardedExecution`` of ``popdist_emu.Stage``s.

    Raises:
        ValueError: no blocks, or stages PopTorch (or the emulator) refuses.
    """
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
    strategy = cast(_Strategy, strategy)  # check_strategy refused anything else
    cls = (
        popdist_emu.ShardedExecution
        if isinstance(strategy, ShardedExecution)
        else popdist_emu.PipelinedExecution
    )
    if not strategy.stages:  # PopTorch's PipelinedExecution(): AutoStage.SameAsIpu
        return cls(*_auto_stages(type(strategy).__name__, AutoStage.SameAsIpu, blocks))
    if isinstance(strategy.stages[0], AutoStage) and len(strategy.stages) == 1:
        return cls(*_auto_stages(type(strategy).__name__, strategy.stages[0], blocks))
    return cls(*_named_stages(type(strategy).__name__, strategy.stages, blocks))


def _named_stages(
    name: str, stages: Sequence[object], blocks: list[tuple[str, int | None]]
) -> list[popdist_emu.Stage]:
    """The emulator's stages for stages given by block ids, each placed by its ``.ipu(n)``
    or else by its blocks' ``ipu_id`` (PopTorch: a Stage overrides the blocks' IPU).

    Raises:
        ValueError: an AutoStage among stages, a block in two stages or in none, a stage
            naming a block the model never runs, or blocks on two IPUs in a stage without
            ``.ipu(n)``.
    """
    ipu_of, order = dict(blocks), [block for block, _ in blocks]
    given: list[tuple[tuple[str, ...], int | None]] = []
    for stage in stages:
        if isinstance(stage, Stage):
            given.append((stage.blocks, stage.ipu_id))
        elif isinstance(stage, list | tuple | str):
            given.append((Stage(*([stage] if isinstance(stage, str) else stage)).blocks, None))
        else:
            raise ValueError(
                f"{name}(..., {stage!r}, ...): each stage is a poptorch.Stage, a block id "
                "or a list of block ids; an AutoStage goes alone: "
                f"{name}(poptorch.AutoStage.AutoIncrement)."
            )
    placed: dict[str, int] = {}
    for k, (held, _) in enumerate(given):
        for block in held:
            if block not in ipu_of:
                raise ValueError(
                    f"{name}: stage {k} names block {block!r}, which the model never runs "
                    f"(its blocks, in the order they run: {order}): correct the id or drop it."
                )
            if block in placed:
                raise ValueError(
                    f"{name}: block {block!r} is in stage {placed[block]} and stage {k}; a "
                    "block belongs to one stage: list it once."
                )
            placed[block] = k
    missing = [block for block in order if block not in placed]
    if missing:
        raise ValueError(
            f"{name}: block {missing[0]!r} runs in the model but no stage holds it (PopTorch: "
            f"Unknown Block): add it to a poptorch.Stage, e.g. poptorch.Stage({missing[0]!r})."
        )
    emulated = []
    for k, (held, ipu) in enumerate(given):
        ipus = sorted({i for i in (ipu_of[block] for block in held) if i is not None})
        if ipu is None and len(ipus) > 1:
            raise ValueError(
                f"{name}: stage {k} holds blocks {list(held)} on IPUs {ipus} and has no IPU "
                f"of its own; a stage runs on one IPU: give it .ipu(n), e.g. "
                f"poptorch.Stage(*{list(held)}).ipu({ipus[0]})."
            )
        emulated.append(
            popdist_emu.Stage(*held, ipu=ipu if ipu is not None or not ipus else ipus[0])
        )
    return emulated


def _auto_stages(
    name: str, auto: AutoStage, blocks: list[tuple[str, int | None]]
) -> list[popdist_emu.Stage]:
    """The stages ``PipelinedExecution(AutoStage.X)`` (or sharded) makes of the blocks, each
    placed by its ``ipu_id``: ``AutoIncrement``, a stage per block, in the order they run
    (blocks on one IPU become stages of their own on it); ``SameAsIpu``, stage k holds the
    blocks on IPU k, which must then run one after the other.

    Raises:
        ValueError: a block without an ``ipu_id``, or ``SameAsIpu`` blocks on one IPU that
            another IPU's block separates.
    """
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
