"""One call's batch and how a step walks it: the layout check and the replicas' accumulation.

A call's batch is laid out as PopART's input, ``[device_iterations, gradient_accumulation,
replication_factor, micro_batch, *sample]`` for every leaf. For device iteration ``d`` each
local replica ``k`` runs its ``gradient_accumulation`` micro-batches ``batch[d, a, k]``
through the compiled micro-step, several together where their gradients fit
(``make_batched_micro_steps``), added in micro-batch order (or, for a pipeline, through the
stages in the strategy's schedule), and hands the reduce-and-update stage one flat
accumulator: its gradient sum, then its loss sum.

References:
    PopART glossary, input layout ``[batches_per_step, accl_factor, repl_factor,
    micro_batch, *sample]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from popdist_emu._options import Options
from popdist_emu.pipeline import Pipeline
from popdist_emu.programs import Program, shape_struct
from popdist_emu.runtime._replica_step import (
    Accumulator,
    Batch,
    Params,
    micro_batches_per_program,
)


def _leaf_path(path: jax.tree_util.KeyPath) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def micro_batch_shapes(batch: Batch, options: Options) -> Any:
    """One replica's micro-batch shapes (``jax.ShapeDtypeStruct`` leaves) of a call's batch.

    Leaves may differ in their micro-batch size, as PopTorch splits each input on its own
    (ViT's pre-training: 2 images and 1 mixup coefficient a micro-batch); the first leaf's
    is the step's number of samples.

    Raises:
        ValueError: a leaf whose leading dimensions are not ``[device_iterations,
            gradient_accumulation, replication_factor, micro_batch]`` of ``options``, or a
            batch with no arrays.
    """
    want = (options.device_iterations, options.gradient_accumulation, options.replication_factor)
    paths_leaves = jax.tree_util.tree_flatten_with_path(batch)[0]
    if not paths_leaves:
        raise ValueError("Trainer: `batch` has no arrays; pass e.g. (images, labels).")
    for path, leaf in paths_leaves:
        shape = tuple(np.shape(leaf))
        if len(shape) < 4 or shape[:3] != want:
            raise ValueError(
                f"Trainer: `batch` leaf {_leaf_path(path)} has shape {shape}, but its "
                f"leading dims must be [device_iterations={want[0]}, "
                f"gradient_accumulation={want[1]}, replication_factor={want[2]}, "
                f"micro_batch, *sample]; lay the batch out that way "
                f"(ReplicaLoader.batch does) or change the Options."
            )
    return jax.tree.map(lambda x: shape_struct(x, tuple(np.shape(x))[3:]), batch)


def _part(
    leaves: Sequence[np.ndarray | jax.Array], treedef: Any, d: int, micro: int | slice, k: int
) -> Batch:
    """Micro-batch ``micro`` (or a slice of them, stacked) of replica ``k`` at device
    iteration ``d``."""
    return jax.tree.unflatten(treedef, [leaf[d, micro, k] for leaf in leaves])


def accumulate(
    batch: Batch,
    d: int,
    *,
    params: Params,
    options: Options,
    micro_step: Program | None,
    pipeline: Pipeline | None,
    zeros: Accumulator,
    batched: Program | None = None,
    with_outputs: bool = False,
) -> tuple[list[Accumulator], list[list[bool | jax.Array]], Any]:
    """Every local replica's flat accumulator for device iteration ``d`` of ``batch``.

    Args:
        batch: the call's batch (see the module docstring for its layout).
        d: the device iteration.
        params: the weights every replica holds.
        options: the replicas and the accumulation.
        micro_step: the compiled micro-step; None for a pipeline.
        pipeline: the replica's pipeline, or None for the micro-step.
        zeros: the accumulator a replica starts from (never written).
        batched: the compiled ``make_batched_micro_steps``, which computes several of a
            replica's micro-batches together (as many as ``micro_batches_per_program``
            allows, as it was compiled for); None runs ``micro_step`` once per micro-batch.
        with_outputs: the programs also return the loss function's outputs (``has_aux``;
            never with a pipeline).

    Returns:
        ``(sums, flags, outputs)``: one flat accumulator (gradient sum, then loss sum) per
        local replica; per replica the finite flags of its micro-batches in order (one
        each, or an array for those computed together); and with ``with_outputs`` the
        outputs of every micro-batch, each leaf stacked ``[gradient_accumulation,
        replication_factor, ...]`` (None without).
    """
    leaves, treedef = jax.tree.flatten(batch)
    accumulation = options.gradient_accumulation
    sums: list[Accumulator] = []
    flags: list[list[bool | jax.Array]] = []
    outputs: list[list[Any]] = []  # per replica, per program call
    together = micro_batches_per_program(accumulation, zeros.nbytes) if batched is not None else 1
    for k in range(options.replication_factor):
        if pipeline is not None:
            # The replica's micro-batches run through the stages (pipelined or sharded) and
            # come out as the same flat accumulator, accumulated in micro-batch order.
            micros = [_part(leaves, treedef, d, a, k) for a in range(accumulation)]
            acc, finite = pipeline.accumulate(params, micros, zeros)
            sums.append(acc)
            flags.append([finite] * accumulation)
            continue
        if micro_step is None:
            raise RuntimeError("accumulate: no micro-step was compiled for this step shape.")
        acc, replica_flags, replica_outputs = zeros, [], []
        for a in range(0, accumulation, together):
            if batched is not None and together > 1:
                chunk = _part(leaves, treedef, d, slice(a, a + together), k)
                acc, finite, *out = batched(params, acc, chunk)
            else:
                acc, finite, *out = micro_step(params, acc, _part(leaves, treedef, d, a, k))
            replica_flags.append(finite)  # read only when the update is not finite
            replica_outputs += out
        sums.append(acc)
        flags.append(replica_flags)
        outputs.append(replica_outputs)
    return sums, flags, _stacked(outputs, together > 1) if with_outputs else None


def _stacked(outputs: list[list[Any]], batched: bool) -> Any:
    """Per replica, per program call, outputs joined on their micro-batches (each call's
    ``batched`` outputs hold several, stacked; a micro-step's one): one tree whose leaves
    are ``[gradient_accumulation, replicas, ...]`` host arrays."""
    join = np.concatenate if batched else np.stack
    per_replica = [
        jax.tree.map(lambda *calls: join([np.asarray(c) for c in calls]), *calls)
        for calls in outputs
    ]
    return jax.tree.map(lambda *replicas: np.stack(replicas, axis=1), *per_replica)
