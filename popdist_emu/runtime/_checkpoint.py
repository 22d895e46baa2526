"""Checkpoint and resume of a :class:`~popdist_emu.Trainer`: one file, any layout.

A checkpoint is ``<dir>/checkpoint.npz``, written by instance 0 through
:func:`contract.atomic_write` (temporary file, fsync, rename: a failure keeps the
previous checkpoint whole). It holds the parameters, the FULL optimiser state (RTS shards
gathered, offloaded state streamed back as host arrays), the number of optimiser steps done
and the caller's metadata (the example stores its seed and batch settings: the loader is a
pure function of the seed and the step, so the step is its position, and there is no other
random state). Because the state is unsharded, a job with another instance layout, another
sharding domain or with offloading switched on or off resumes from it, and the numbers go on
bit for bit as if the run had never stopped.

Why not orbax-checkpoint: it writes one directory per step through TensorStore (a 22 MB
native wheel, plus asyncio machinery) and, in a multi-process job, expects every process to
write its shards; here one instance writes one small file, and the project's one atomic-write
path (``contract.atomic_write``) is the contract for every file it writes.

References:
    numpy ``savez`` (an ``.npz`` is a zip of ``.npy`` files; given a file object it writes
    exactly there). PopTorch's ``Options.Training`` documentation describes the same split:
    the optimiser state is saved with the model so that training can resume.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import jax
import numpy as np

import gcl
from contract import atomic_write
from popdist_emu._progress import LOGGER
from popdist_emu.runtime._checkpoint_owner import CheckpointError, claim_for
from popdist_emu.runtime._offload import StreamingState, stream_out
from popdist_emu.runtime._replica_step import TrainState
from popdist_emu.runtime._sharded_update import ShardedOptState, shard_state, unshard_state
from popdist_emu.runtime._trainer import Trainer

CHECKPOINT_FILE = "checkpoint.npz"
_META = "__meta__"
# A leaf of the trainer's weights or optimiser state, or its shape: what has a dtype and a
# shape to save, check or restore.
LeafLike = np.ndarray | jax.Array | jax.ShapeDtypeStruct
# A metadata value, kept as it is by a filter.
V = TypeVar("V")


def checkpoint_path(directory: str | os.PathLike[str]) -> str:
    """The checkpoint file in ``directory``."""
    return os.path.join(os.fspath(directory), CHECKPOINT_FILE)


def _as_bits(x: np.ndarray) -> np.ndarray:
    # Summing bit patterns is exact even for -0.0 and NaN payloads: one replica holds each
    # element, every other replica contributes zero bits.
    return x.view(np.dtype(f"u{x.dtype.itemsize}")) if x.dtype.kind in "fc" else x


def _live_state(trainer: Trainer, where: str) -> TrainState:
    if trainer.state is None:
        raise CheckpointError(
            f"{where}: an offline trainer holds shapes only, nothing to save or restore; "
            f"run without --offline-mode."
        )
    return trainer.state


def full_opt_state(trainer: Trainer) -> Any:
    """The trainer's whole optimiser state as host arrays, the same on every instance.

    Under RTS every instance must call this (it gathers the shards with one gcl all-reduce).
    """
    state = _live_state(trainer, "full_opt_state").opt_state
    if isinstance(state, StreamingState):
        return jax.tree_util.tree_unflatten(state.treedef, [np.array(x) for x in state.leaves])
    if not isinstance(state, ShardedOptState):
        return jax.tree.map(np.array, state)
    plan = trainer.sharding_plan
    if plan is None:
        raise CheckpointError(
            "full_opt_state: the optimiser state is sharded but the trainer has no sharding "
            "plan; build the trainer with Options(replicated_tensor_sharding=True)."
        )
    offset = trainer.options.replica_offset
    parts = []
    leaves: list[np.ndarray] = []  # each replica's whole copy has the same leaves
    for k in range(len(state.shards)):
        replica = offset + k
        full = unshard_state(plan, state, [replica], [k])
        leaves = [np.array(x) for x in jax.tree_util.tree_leaves(full)]
        # One whole copy: sharded leaves from the replicas of domain 0 (each owns its part,
        # zeros elsewhere), unsharded leaves (a weight under the sharding threshold's state
        # too: every replica holds all of it) from replica 0; every other replica adds zeros.
        keep = [
            replica < plan.domain_size if m is not None and plan.sharded[m] else replica == 0
            for m in state.mirrors
        ]
        parts.append(
            [_as_bits(x if on else np.zeros_like(x)) for x, on in zip(leaves, keep, strict=True)]
        )
    summed = gcl.all_reduce(parts, "add", comm=trainer.comm, timeout=trainer.timeout)[0]
    leaves = [
        np.asarray(s).view(x.dtype).reshape(x.shape) for s, x in zip(summed, leaves, strict=True)
    ]
    return state.treedef.unflatten(leaves)


def place_opt_state(trainer: Trainer, full: Any, where: str = "optimiser state") -> None:
    """Makes ``full`` (a whole optimiser state, host arrays) the trainer's, in the form its
    stage keeps: sharded for RTS (each local replica's part), host arrays when offloaded,
    device copies otherwise (the update may donate them)."""
    current = _live_state(trainer, "place_opt_state").opt_state
    opt_state: Any
    if isinstance(current, StreamingState):
        opt_state = stream_out(full)
    elif isinstance(current, ShardedOptState):
        plan = trainer.sharding_plan
        if plan is None:
            raise CheckpointError(
                f"{where}: the trainer's optimiser state is sharded but it has no sharding "
                f"plan; build it with Options(replicated_tensor_sharding=True)."
            )
        offset = trainer.options.replica_offset
        opt_state = shard_state(plan, full, range(offset, offset + len(current.shards)))
    else:
        opt_state = jax.tree.map(lambda x: jax.device_put(np.array(x)), full)
    trainer.state = TrainState(trainer.params, opt_state)


def _layout(leaves: Sequence[LeafLike]) -> list[list[str | list[int]]]:
    """``[[dtype, shape], ...]`` of arrays or shape structs, in leaf order."""
    return [[np.dtype(x.dtype).str, list(x.shape)] for x in leaves]


def _checksum(arrays: Mapping[str, np.ndarray], info: Mapping[str, object]) -> str:
    """SHA-256 of every array (name, dtype, shape, bytes) and of the metadata but the sum."""
    digest = hashlib.sha256()
    for key in sorted(k for k in arrays if k != _META):
        x = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}:{x.dtype.str}:{list(x.shape)}:".encode())
        digest.update(x.tobytes())
    rest = {k: v for k, v in info.items() if k != "checksum"}
    digest.update(json.dumps(rest, sort_keys=True).encode())
    return digest.hexdigest()


def _public(info: Mapping[str, V]) -> dict[str, V]:
    """The metadata without the checkpoint's own records (its checksum and layout)."""
    return {k: v for k, v in info.items() if k not in ("checksum", "layout")}


def _damaged(path: str, why: str) -> CheckpointError:
    return CheckpointError(
        f"{path} is damaged ({why}): resume from an intact copy, or start again without --resume."
    )


def load_checkpoint(
    directory: str | os.PathLike[str],
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The checkpoint's metadata and arrays, verified whole before anything uses them.

    Raises:
        CheckpointError: no checkpoint; a truncated or corrupted file (its checksum, or the
            archive itself); non-finite values (a run that diverged).
    """
    path = checkpoint_path(directory)
    if not os.path.isfile(path):
        raise CheckpointError(
            f"no checkpoint at {path!r}: run with --checkpoint-dir {directory} first, or drop "
            f"--resume."
        )
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = {k: saved[k] for k in saved.files}
        info = json.loads(arrays.pop(_META).tobytes().decode())
    except Exception as error:  # whatever a damaged archive raises (BadZipFile,
        # EOFError, KeyError, zlib.error, NotImplementedError for a flipped method byte...)
        reason = str(error).splitlines()[0][:120] if str(error) else ""
        raise _damaged(path, f"{type(error).__name__}: {reason}") from None
    if not isinstance(info, dict) or "checksum" not in info:
        raise _damaged(path, "it carries no checksum")
    if _checksum(arrays, info) != info["checksum"]:
        raise _damaged(path, "its checksum does not match its content")
    step = info.get("step")
    if type(step) is not int or step < 0:  # bool is an int to isinstance
        raise CheckpointError(
            f"{path}: its step {step!r} is not a whole number of optimiser steps >= 0, so it "
            f"was edited: resume from an intact checkpoint, or start again."
        )
    for key in sorted(arrays):
        x = arrays[key]
        if x.dtype.kind in "fc" and not np.isfinite(x).all():
            raise CheckpointError(
                f"{path}: {key} holds non-finite values (NaN or inf), so the run that wrote "
                f"it had diverged: resume from an earlier checkpoint, or start again."
            )
    return info, arrays


def check_fits(directory: str | os.PathLike[str], trainer: Trainer) -> dict[str, Any]:
    """Refuses, before any compile, a checkpoint whose shapes the trainer does not have.

    Returns:
        The checkpoint's metadata.

    Raises:
        CheckpointError: as :func:`load_checkpoint`, or another parameter or optimiser-state
            layout (another model size or optimiser) than the trainer's.
    """
    info, arrays = load_checkpoint(directory)
    params_like, opt_like = _trainer_leaves(trainer)
    path = checkpoint_path(directory)
    for name, like in (("params", params_like), ("opt_state", opt_like)):
        saved, have = info["layout"][name], _layout(like)
        if saved != have:
            first = next(
                (i for i, (a, b) in enumerate(zip(saved, have, strict=False)) if a != b),
                min(len(saved), len(have)),
            )
            raise CheckpointError(
                f"{path}: {name} differ from the trainer's ({len(saved)} arrays, not "
                f"{len(have)}; first difference at array {first}: "
                f"{saved[first] if first < len(saved) else None} vs "
                f"{have[first] if first < len(have) else None}): resume with the model and "
                f"optimiser that wrote the checkpoint."
            )
    _check_counts(info, arrays, trainer, path)
    return _public(info)


def _check_counts(
    info: Mapping[str, Any], arrays: Mapping[str, np.ndarray], trainer: Trainer, path: str
) -> None:
    """Refuses a checkpoint whose step disagrees with the optimiser's own step count (optax's
    ``count`` leaves: Adam's, a schedule's, injected hyperparameters'), which the weights
    were trained with: resuming would replay or skip data on already-trained weights. An
    optimiser without a count (plain SGD) leaves the step unchecked."""
    current = _live_state(trainer, "checkpoint").opt_state
    tree = (
        jax.tree_util.tree_unflatten(current.treedef, range(current.treedef.num_leaves))
        if isinstance(current, StreamingState | ShardedOptState)
        else current
    )
    for index, (key_path, _) in enumerate(jax.tree_util.tree_flatten_with_path(tree)[0]):
        last = key_path[-1] if key_path else None
        if getattr(last, "name", None) != "count":
            continue
        saved = arrays.get(f"opt_state/{index:05d}")
        if saved is None or saved.shape != () or saved.dtype.kind not in "iu":
            continue
        if int(saved) != info["step"]:
            raise CheckpointError(
                f"{path}: its step {info['step']} disagrees with the optimiser's own count "
                f"{int(saved)} ({jax.tree_util.keystr(key_path)}), so one of them was edited: "
                f"resume from an intact checkpoint, or start again."
            )


def save_checkpoint(
    directory: str | os.PathLike[str], trainer: Trainer, meta: Mapping[str, object] | None = None
) -> str | None:
    """Writes the trainer's state to ``directory/checkpoint.npz`` (instance 0 writes).

    Every instance must call it (RTS gathers its shards). Which instance writes comes from
    ``trainer.options.instance_index`` (resolved once with the layout), so a job described
    by an explicit layout saves without reading PopDist's environment.

    Returns:
        The path on instance 0, None elsewhere.
    """
    opt_state = full_opt_state(trainer)
    if trainer.options.instance_index != 0:
        return None
    claim_for(directory, trainer)
    state = _live_state(trainer, "save_checkpoint")
    params = [np.array(x) for x in jax.tree_util.tree_leaves(state.params)]
    opt = jax.tree_util.tree_leaves(opt_state)
    arrays = {f"params/{i:05d}": x for i, x in enumerate(params)}
    arrays |= {f"opt_state/{i:05d}": np.asarray(x) for i, x in enumerate(opt)}
    info = {"step": trainer.steps_done, **dict(meta or {})}
    # What shapes the checkpoint (checked before any compile on resume), and a checksum of
    # all of it: a damaged file is refused rather than resumed.
    info["layout"] = {"params": _layout(params), "opt_state": _layout(opt)}
    info["checksum"] = _checksum(arrays, info)
    arrays[_META] = np.frombuffer(json.dumps(info).encode(), np.uint8)
    os.makedirs(directory, exist_ok=True)
    path = checkpoint_path(directory)
    with atomic_write(path, "wb") as f:
        # numpy's stub lets a ** key stand for the bool `allow_pickle`; these keys are
        # "params/00000"-style names, never that one.
        np.savez(f, **arrays)  # type: ignore[arg-type]
    LOGGER.info("checkpoint of step %d written to %s", trainer.steps_done, path)
    return path


def read_meta(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of the checkpoint in ``directory`` (``step`` and the caller's)."""
    return _public(load_checkpoint(directory)[0])


def _restore_leaves(
    saved: Mapping[str, np.ndarray], prefix: str, like: Sequence[LeafLike], path: str
) -> list[np.ndarray]:
    keys = sorted(k for k in saved if k.startswith(prefix + "/"))
    if len(keys) != len(like):
        raise CheckpointError(
            f"{path}: {len(keys)} {prefix} arrays, the trainer has {len(like)}: resume with the "
            f"model and optimiser that wrote the checkpoint."
        )
    out = []
    for key, ref in zip(keys, like, strict=True):
        x = saved[key]
        if x.shape != tuple(ref.shape) or x.dtype != np.dtype(ref.dtype):
            raise CheckpointError(
                f"{path}: {key} is {x.dtype}{list(x.shape)}, the trainer expects "
                f"{np.dtype(ref.dtype)}{list(ref.shape)}: resume with the same model."
            )
        out.append(x)
    return out


def _trainer_leaves(trainer: Trainer) -> tuple[list[LeafLike], list[LeafLike]]:
    """The trainer's parameter and full optimiser-state leaves (arrays or shape structs)."""
    state = _live_state(trainer, "checkpoint")
    current = state.opt_state
    opt_like: list[LeafLike]
    if isinstance(current, StreamingState):
        opt_like = list(current.leaves)
    elif isinstance(current, ShardedOptState):
        opt_like = [
            jax.ShapeDtypeStruct(s, x.dtype)
            for s, x in zip(current.shapes, current.shards[0], strict=True)
        ]
    else:
        opt_like = jax.tree_util.tree_leaves(current)
    return jax.tree_util.tree_leaves(state.params), opt_like


def restore_checkpoint(directory: str | os.PathLike[str], trainer: Trainer) -> dict[str, Any]:
    """Loads ``directory/checkpoint.npz`` into ``trainer`` (every instance reads it).

    The optimiser state takes the form the trainer's stage keeps: sharded for RTS (each
    local replica's part), host arrays when offloaded, device arrays otherwise.

    Returns:
        The checkpoint's metadata (``step`` and what the writer stored).
    """
    claim_for(directory, trainer)  # no other job writes it while this one reads
    meta, saved = load_checkpoint(directory)
    path = checkpoint_path(directory)
    _check_counts(meta, saved, trainer, path)
    state = _live_state(trainer, "restore_checkpoint")
    params_def = jax.tree_util.tree_structure(state.params)
    current = state.opt_state
    params_like, opt_like = _trainer_leaves(trainer)
    opt_def = (
        current.treedef
        if isinstance(current, StreamingState | ShardedOptState)
        else jax.tree_util.tree_structure(current)
    )
    params = _restore_leaves(saved, "params", params_like, path)
    opt = _restore_leaves(saved, "opt_state", opt_like, path)
    full = jax.tree_util.tree_unflatten(opt_def, opt)
    params_tree = jax.tree_util.tree_unflatten(
        params_def, [jax.device_put(np.array(x)) for x in params]
    )
    trainer.state = TrainState(params_tree, current)
    place_opt_state(trainer, full, path)
    trainer.steps_done = int(meta["step"])
    if trainer.options.instance_index == 0:
        LOGGER.info("resumed from %s at step %d", path, trainer.steps_done)
    return _public(meta)
