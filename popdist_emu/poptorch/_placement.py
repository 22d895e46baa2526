"""How many IPUs a PopTorch program's replica gets, and PopTorch's placement rules in its
own words.

Outside ``poprun-emu`` (``python program.py``) PopTorch attaches as many IPUs as the model's
placement needs: its blocks' ``ipu_id``\\ s (or its stages' ``.ipu(n)``) 0..N-1 make a
replica of N IPUs, on one host, one replica unless the program set ``replicationFactor``.
The emulator does the same, so a plain run of a program whose blocks span four IPUs runs
(and is simulated) on four, instead of asking for a launcher flag it was never given. Under
``poprun-emu`` the user's ``--ipus-per-replica`` rules, as PopRun's does: a block placed
beyond it is refused in one line naming the flag.

The rules PopTorch enforces are checked here in the program's vocabulary (the call that
fixes them: ``opts.Training.gradientAccumulation(n)``, ``ipu_id``), before the emulator's
own pipeline checks (``popdist_emu.pipeline._rules``), which speak its Python API.

Decisions where PopTorch's documentation is silent: a placement that leaves an IPU between
0 and its highest ``ipu_id`` without a block is refused (the emulator runs a stage on every
IPU of a replica), and a number of IPUs that is not a power of two is refused (PopTorch
attaches power-of-two IPU counts; its ``autoRoundNumIPUs`` would leave IPUs idle).

References:
    PopTorch User Guide, "Multi-IPU execution strategies" (``ipu_id``, ``poptorch.Stage``),
    "Options" (``autoRoundNumIPUs``: "the number of IPUs requested must be a power of 2"),
    "Distributed execution" (PopRun's ``--ipus-per-replica``); PopTorch's
    ``popart_compiler/source/Compiler.cpp`` (github.com/graphcore/poptorch: the gradient
    accumulation of a pipelined training model must be at least 2N - 1 for N stages;
    ``Compiler::initSession`` sets ``autoRecomputation`` to ``RecomputationType::Pipeline``
    for a pipelined model over more than one IPU unless the program set it); PopART
    ``SessionOptions`` (``RecomputationType``: None, Standard, NormOnly, Pipeline,
    RecomputeAll).
"""

from __future__ import annotations

import dataclasses

import hardware
import popdist_emu
from popdist_emu.popdist import api as popdist

_EmuStrategy = popdist_emu.PipelinedExecution | popdist_emu.ShardedExecution
PIPELINE, RECOMPUTE_ALL = 3, 4  # PopART's RecomputationType values (``_poptorch_groups``)


def placed_options(
    fields: popdist_emu.Options, strategy: _EmuStrategy, auto_recomputation: int | None = None
) -> popdist_emu.Options:
    """The options a training program with ``strategy``'s stages runs with.

    Args:
        fields: the program's options, resolved (its layout from PopRun, or one instance).
        strategy: the emulator's strategy for the model's blocks (``_stages``).
        auto_recomputation: the PopART ``RecomputationType`` the program set with
            ``opts._Popart.set("autoRecomputation", n)``; None when it set none.

    Returns:
        ``fields`` with ``strategy``, its recomputation (``recomputation``) and, outside
        ``poprun-emu``, a replica of as many IPUs as the stages are placed on.

    Raises:
        ValueError: a placement PopTorch or the emulator refuses, in one line naming the fix.
    """
    ipus = sorted({s.ipu if s.ipu is not None else k for k, s in enumerate(strategy.stages)})
    need = ipus[-1] + 1
    layout = fields.layout
    blocks = {s.ipu if s.ipu is not None else k: s.blocks for k, s in enumerate(strategy.stages)}
    if popdist.isPopdistEnvSet():
        if need > layout.ipus_per_replica:
            raise ValueError(
                f"poptorch: block {blocks[ipus[-1]][0]!r} is placed on IPU {ipus[-1]} (its "
                f"ipu_id) but poprun-emu gave each replica --ipus-per-replica "
                f"{layout.ipus_per_replica} (IPUs 0..{layout.ipus_per_replica - 1}): run "
                f"poprun-emu with --ipus-per-replica {_power_of_two(need)}, or give the block an "
                f"ipu_id below {layout.ipus_per_replica}."
            )
    else:
        idle = [i for i in range(need) if i not in ipus]
        if idle:
            raise ValueError(
                f"poptorch: the model's blocks are placed on IPUs {ipus}, leaving IPU {idle[0]} "
                f"without a block; popdist-emu runs a stage on every IPU of a replica: number "
                f"the ipu_ids 0..{len(ipus) - 1}."
            )
        if need not in hardware.VALID_IPUS_PER_REPLICA:
            raise ValueError(
                f"poptorch: the model's blocks are placed on {need} IPUs (ipu_id 0..{need - 1}); "
                f"PopTorch attaches a power of two of them: place blocks on "
                f"{_power_of_two(need)} IPUs."
            )
        if need != layout.ipus_per_replica:
            layout = dataclasses.replace(layout, ipus_per_replica=need)
    check_accumulation(fields.gradient_accumulation, len(strategy.stages), strategy.strategy)
    recomputing = recomputation(fields, strategy.strategy, len(ipus), auto_recomputation)
    return dataclasses.replace(
        fields, layout=layout, execution_strategy=strategy, recomputation=recomputing
    )


def recomputation(
    fields: popdist_emu.Options, strategy: str, num_ipus: int, auto_recomputation: int | None
) -> bool:
    """Whether the pipeline's stages stash only their inputs and recompute (the hardware
    model's ``recomputation``), as PopTorch configures PopART.

    PopTorch turns PopART's ``autoRecomputation`` to ``RecomputationType::Pipeline`` for a
    pipelined model over more than one IPU unless the program set it ("If we are pipelining
    we want to turn on recompute by default"), so a pipelined program recomputes without
    asking; sharded execution and one IPU keep PopART's default, none. A program's own
    ``autoRecomputation`` rules: ``Pipeline`` and ``RecomputeAll`` recompute every forward
    operation from the stage's input; ``None`` stashes the forward's activations, and so do
    ``Standard`` and ``NormOnly`` here (they recompute some operations, chosen by PopART's
    liveness heuristics, which the hardware model does not have: it counts their stash as
    the whole forward's, the larger bound).
    """
    if auto_recomputation is not None:
        return auto_recomputation in (PIPELINE, RECOMPUTE_ALL)
    return fields.recomputation or (strategy == "pipelined" and num_ipus > 1)


def check_accumulation(accumulation: int, stages: int, strategy: str) -> None:
    """PopTorch's rule for a pipelined training model, refused naming the option's call.

    Raises:
        ValueError: a gradient accumulation below ``2 x stages - 1`` when pipelined.
    """
    need = hardware.min_gradient_accumulation(stages, strategy)
    if accumulation < need:
        raise ValueError(
            f"poptorch: a pipelined training model over {stages} stages needs a gradient "
            f"accumulation of at least {need} (2 x {stages} - 1 pipeline stages of training), "
            f"and the options give {accumulation}: call "
            f"opts.Training.gradientAccumulation({need}) or more (each call's combined batch "
            f"grows with it)."
        )


def _power_of_two(n: int) -> int:
    """The least power of two at least ``n``."""
    return 1 << max(n - 1, 0).bit_length()
