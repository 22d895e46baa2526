"""The rules PopTorch and PopART enforce on a pipeline, each refused in one line.

References:
    PopTorch User Guide, "Multi-IPU execution strategies" (stages placed on IPUs, blocks);
    PopART User Guide, "Pipelining" (the gradient accumulation factor must be at least the
    number of pipeline stages; a training pipeline over N IPUs has 2N - 1 of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hardware


class PipelineError(ValueError):
    """A pipeline that PopTorch or PopART would refuse; the message names the fix."""


def check_pipeline(
    model: Any,
    stages: Sequence[Any],
    params: Any,
    ipus_per_replica: int,
    gradient_accumulation: int,
    strategy: Any,
) -> None:
    """PopTorch's and PopART's rules for a pipeline, each refused in one line.

    Raises:
        PipelineError: stage count vs the replica's IPUs, stages out of IPU order, a block
            in no stage or in two, a parameter owned by no block or by two, or too little
            gradient accumulation for a pipelined training step.
    """
    n = len(stages)
    if n != ipus_per_replica:
        raise PipelineError(
            f"{n} stages for --ipus-per-replica {ipus_per_replica}: place exactly one stage "
            f"on each IPU of the replica (or run with --ipus-per-replica {n})."
        )
    ipus = [s.ipu if s.ipu is not None else i for i, s in enumerate(stages)]
    if ipus != sorted(ipus) or len(set(ipus)) != n or not all(0 <= i < n for i in ipus):
        raise PipelineError(
            f"stages are placed on IPUs {ipus}: stages must run on IPUs 0..{n - 1} in "
            "increasing order, one stage per IPU."
        )
    placed = [name for s in stages for name in s.blocks]
    order = [b.name for b in model.blocks]
    if sorted(placed) != sorted(order) or placed != order:
        raise PipelineError(
            f"stages hold blocks {placed} but the model's blocks are {order}: every block "
            "belongs to exactly one stage, in model order."
        )
    owners: dict[str, list[str]] = {}
    for b in model.blocks:
        for k in b.params:
            owners.setdefault(k, []).append(b.name)
    keys = list(params) if isinstance(params, dict) else []
    shared = {k: v for k, v in owners.items() if len(v) > 1}
    if shared:
        k, v = next(iter(shared.items()))
        raise PipelineError(
            f"parameter {k!r} is owned by blocks {v}: every parameter belongs to exactly one "
            "block (copy it, or merge the blocks)."
        )
    orphans = [k for k in keys if k not in owners]
    unknown = [k for k in owners if k not in keys]
    if orphans or unknown:
        raise PipelineError(
            f"parameters {orphans or unknown} are "
            + ("owned by no block" if orphans else "owned by a block but not in params")
            + ": list every top-level key of params in exactly one Block(params=...)."
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
