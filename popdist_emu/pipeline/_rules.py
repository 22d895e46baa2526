"""The rules PopTorch and PopART enforce on a pipeline, each refused in one line.

References:
    PopTorch User Guide, "Multi-IPU execution strategies" (stages placed on IPUs, blocks,
    ``ipu_id``);
    PopART User Guide, "Pipelining" (the gradient accumulation factor must be at least the
    number of pipeline stages; a training pipeline over N IPUs has 2N - 1 of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import hardware

if TYPE_CHECKING:  # the model's classes, whose module imports this one
    from popdist_emu.pipeline._model import (
        BlockModel,
        PipelinedExecution,
        ShardedExecution,
        Stage,
    )


class PipelineError(ValueError):
    """A pipeline that PopTorch or PopART would refuse; the message names the fix."""


def check_pipeline(
    model: BlockModel,
    stages: Sequence[Stage],
    params: Any,
    ipus_per_replica: int,
    gradient_accumulation: int,
    strategy: PipelinedExecution | ShardedExecution,
) -> None:
    """PopTorch's and PopART's rules for a pipeline, each refused in one line.

    A stage may run on any IPU of the replica and several stages may share one (PopTorch's
    ``ipu_id``, PopART's virtual graphs), but every IPU runs at least one. A parameter may
    be used by several blocks when they all run on one IPU (a tied embedding and decoder).

    Raises:
        PipelineError: a stage on an IPU outside the replica, an IPU without a stage, a
            block in no stage or in two, a parameter owned by no block or used on two
            IPUs, or too little gradient accumulation for a pipelined training step.
    """
    n = len(stages)
    ipus = [s.ipu if s.ipu is not None else i for i, s in enumerate(stages)]
    outside = [i for i in ipus if not 0 <= i < ipus_per_replica]
    if outside:
        raise PipelineError(
            f"a stage is placed on IPU {outside[0]} but a replica has --ipus-per-replica "
            f"{ipus_per_replica} (IPUs 0..{ipus_per_replica - 1}): place it on one of them, or "
            f"run with --ipus-per-replica {max(ipus) + 1}."
        )
    idle = sorted(set(range(ipus_per_replica)) - set(ipus))
    if idle:
        raise PipelineError(
            f"{n} stages on IPUs {sorted(set(ipus))} leave IPU {idle[0]} of the replica's "
            f"{ipus_per_replica} without a stage: place a stage on every IPU (or run with "
            f"--ipus-per-replica {len(set(ipus))} and renumber the IPUs)."
        )
    placed = [name for s in stages for name in s.blocks]
    order = [b.name for b in model.blocks]
    if sorted(placed) != sorted(order) or placed != order:
        raise PipelineError(
            f"stages hold blocks {placed} but the model's blocks are {order}: every block "
            "belongs to exactly one stage, in model order."
        )
    ipu_of_block = {name: ipus[k] for k, s in enumerate(stages) for name in s.blocks}
    owners: dict[str, list[str]] = {}
    for b in model.blocks:
        for k in b.params:
            owners.setdefault(k, []).append(b.name)
    keys = list(params) if isinstance(params, dict) else []
    for k, v in owners.items():
        apart = sorted({ipu_of_block[name] for name in v})
        if len(apart) > 1:
            raise PipelineError(
                f"parameter {k!r} is used by blocks {v} on IPUs {apart}: a weight lives on one "
                "IPU, so place every block that uses it on the same IPU (as a tied "
                "embedding and decoder share IPU 0), or give each block its own copy."
            )
    orphans = [k for k in keys if k not in owners]
    unknown = [k for k in owners if k not in keys]
    if orphans or unknown:
        raise PipelineError(
            f"parameters {orphans or unknown} are "
            + ("owned by no block" if orphans else "owned by a block but not in params")
            + ": list every top-level key of params in at least one Block(params=...)."
        )
    check_gradient_accumulation(gradient_accumulation, n, strategy.strategy)


def check_gradient_accumulation(gradient_accumulation: int, num_stages: int, strategy: str) -> None:
    """PopTorch's rule: a pipelined training step needs ``2N - 1`` micro-batches or more
    (``hardware.min_gradient_accumulation``, with its source).

    Raises:
        PipelineError: ``gradient_accumulation`` is below
            ``hardware.min_gradient_accumulation(num_stages, strategy)``.
    """
    need = hardware.min_gradient_accumulation(num_stages, strategy)
    if gradient_accumulation < need:
        raise PipelineError(
            f"gradient_accumulation={gradient_accumulation} is too small for a pipelined "
            f"training step over {num_stages} stages: PopTorch needs it >= the {need} "
            f"pipeline stages of training (2 x {num_stages} - 1; use "
            f"--gradient-accumulation {need} or more)."
        )
