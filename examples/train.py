"""Data-parallel training of the PopTorch pipelining tutorial's network on handwritten digits.

Run it alone (1 replica) or under the launcher, e.g.::

    poprun-emu --num-replicas 16 --num-instances 4 examples/train.py

The network is the tutorial's ``Network``: ``ConvLayer(1, 10, 5, 2)``,
``ConvLayer(10, 20, 5, 2)``, ``Linear(320, 256)`` + ReLU, ``Linear(256, 10)``, where a
ConvLayer is a 5x5 convolution, a 2x2 max-pool and a ReLU. Adapted to scikit-learn's 8x8
digits (the tutorial uses 28x28 MNIST, where unpadded 5x5 convolutions give 20*4*4 = 320
features): the convolutions use SAME padding, so 8x8 -> pool 4x4 -> pool 2x2 and the flatten
has 20*2*2 = 80 features, making the first linear layer ``Linear(80, 256)``. Written in plain
JAX (NHWC; ``pipelined_training``'s tutorial network), trained with optax AdamW as the
tutorial does. The last line printed (by instance 0) is a JSON object with the losses and the
test accuracy.

With ``--ipus-per-replica 2`` or ``4`` (PopDist's ``getNumIpusPerReplica()``) the network
runs as the tutorial's four blocks B1..B4 over the replica's IPUs (one block per IPU on 4,
two on 2), ``--strategy pipelined`` (default) or ``sharded``, e.g.::

    poprun-emu --num-replicas 2 --num-instances 2 --ipus-per-replica 4 examples/train.py \
        --gradient-accumulation 8

References:
    Graphcore tutorials, "PopTorch: pipelining" (the Network and AdamW); scikit-learn
    ``load_digits``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import popdist
from pipelined_training import (
    TUTORIAL_BLOCK_MODEL,
    TUTORIAL_STAGES,
    init_tutorial_params,
    tutorial_loss,
    tutorial_network,
)

import hardware
import popdist_emu
from popdist_emu.arguments import (
    ArgumentParser,
    output_directory,
    output_file,
    per_ipu_proportions,
    positive_float,
    positive_int,
    proportion,
    refuse_batch_unless_it_fits,
    seed,
)

# Chosen by measurement on the 2-core development machine: with 16 replicas (global batch
# 128, about 9 epochs) the loss falls from 2.30 to about 0.03 and the test accuracy reaches
# about 97 %; lr 3e-3 or micro-batch 4 ended near 95 %.
DEFAULT_STEPS = 100
DEFAULT_MICRO_BATCH = 8
DEFAULT_LEARNING_RATE = 1e-2


def execution_strategy(ipus_per_replica: int, strategy: str):
    """The tutorial's ``PipelinedExecution``/``ShardedExecution`` for 2 or 4 IPUs; None for 1."""
    if ipus_per_replica == 1:
        return None
    if ipus_per_replica not in TUTORIAL_STAGES:
        print(
            f"train.py: --ipus-per-replica {ipus_per_replica} is not supported: the network "
            "has four blocks, so use 1, 2 or 4.",
            file=sys.stderr,
        )
        raise SystemExit(2)
    cls = (
        popdist_emu.PipelinedExecution if strategy == "pipelined" else popdist_emu.ShardedExecution
    )
    return cls(*TUTORIAL_STAGES[ipus_per_replica])


def accuracy(params: dict, images: np.ndarray, labels: np.ndarray) -> float:
    """Share of ``images`` classified as ``labels`` (one compiled program)."""
    predicted = np.asarray(
        jax.jit(lambda p, x: jnp.argmax(tutorial_network(p, x), axis=-1))(params, images)
    )
    return float(np.mean(predicted == labels))


def flat_params(params: dict) -> dict[str, np.ndarray]:
    """One array per parameter path, ``layer1/conv/w`` style, for ``.npz`` files."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {"/".join(str(k.key) for k in path): np.asarray(v) for path, v in flat}


def save_params(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Writes ``arrays`` as ``.npz`` to exactly ``path`` (np.savez adds ``.npz`` only to a
    name, not to a file object), through a temporary file renamed into place: a failed or
    interrupted write keeps the previous file."""
    with popdist_emu.atomic_write(path, "wb") as f:
        np.savez(f, **arrays)


# What decides which samples each step reads: a resume that changes one changes the data
# stream, refused unless --allow-new-data-order says that is what the user wants.
_DATA_KEYS: tuple[str, ...] = ("replicas", "seed", "micro_batch_size", "gradient_accumulation")
_DATA_KEYS += ("device_iterations",)
# Kept in the checkpoint and always checked: the optimiser's learning rate.
_RESUME_KEYS: tuple[str, ...] = (*_DATA_KEYS, "learning_rate")


def _resume_values(args: argparse.Namespace) -> dict:
    """The values a checkpoint records and a resume compares: the flags', and the job's
    replica count (PopRun's, read without JAX)."""
    return {key: getattr(args, key) for key in _RESUME_KEYS if key != "replicas"} | {
        "replicas": popdist.getNumTotalReplicas()
    }


def check_resumable(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses, before any JAX work, a --resume whose checkpoint is missing, was written with
    another learning rate, or with another data stream (replicas, micro-batch, accumulation,
    device iterations, seed) unless --allow-new-data-order; and ends a resume with nothing
    left to run in one line."""
    try:
        meta = popdist_emu.read_checkpoint_meta(args.checkpoint_dir)
    except popdist_emu.CheckpointError as error:
        parser.error(str(error))
    now = _resume_values(args)
    for key in _RESUME_KEYS:
        if key not in meta:  # a checkpoint of an older train.py: not recorded, not checked
            continue
        if meta[key] == now[key] or (key in _DATA_KEYS and args.allow_new_data_order):
            continue
        flag = "--num-replicas (poprun-emu)" if key == "replicas" else f"--{key.replace('_', '-')}"
        fix = (
            "resume with the same value, or add --allow-new-data-order to read a different "
            "sample order from here on"
            if key in _DATA_KEYS
            else "resume with the same value"
        )
        parser.error(
            f"--resume: the checkpoint was written with {flag} {meta[key]}, not {now[key]}: {fix}."
        )
    if meta["step"] > args.steps:
        parser.error(
            f"--resume: the checkpoint is at step {meta['step']}, past --steps {args.steps}: "
            f"give --steps >= {meta['step']} (the total, not the steps still to run)."
        )
    if meta["step"] == args.steps:
        if popdist.getInstanceIndex() == 0:
            print(
                f"train.py: --resume: the checkpoint in {args.checkpoint_dir} is already at "
                f"step {args.steps} of --steps {args.steps}: nothing to run (give a larger "
                f"--steps to train on).",
                file=sys.stderr,
                flush=True,
            )
        raise SystemExit(0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # Every value is checked here, before any JAX work: one line and exit code 2 if bad.
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=positive_int, default=DEFAULT_STEPS, help="optimiser steps")
    parser.add_argument("--micro-batch-size", type=positive_int, default=DEFAULT_MICRO_BATCH)
    parser.add_argument("--gradient-accumulation", type=positive_int, default=1)
    parser.add_argument("--device-iterations", type=positive_int, default=1)
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--learning-rate", type=positive_float, default=DEFAULT_LEARNING_RATE)
    parser.add_argument(
        "--save",
        metavar="PATH",
        type=output_file,
        help="write the final params to exactly PATH (.npz format), renamed into place",
    )
    parser.add_argument("--replicated-tensor-sharding", action="store_true")
    parser.add_argument("--offload-optimiser", action="store_true")
    parser.add_argument(
        "--prefetch-depth", type=positive_int, default=hardware.DEFAULT_PREFETCH_DEPTH
    )
    parser.add_argument(
        "--strategy",
        choices=("pipelined", "sharded"),
        default="pipelined",
        help="execution over the IPUs of a replica (with --ipus-per-replica 2 or 4)",
    )
    parser.add_argument(
        "--recompute", action="store_true", help="stash only stage inputs (pipelines)"
    )
    parser.add_argument(
        "--available-memory-proportion",
        type=proportion,
        nargs="+",
        default=[hardware.DEFAULT_AVAILABLE_MEMORY_PROPORTION],
        metavar="P",
        help="PopLibs' availableMemoryProportion of the convolutions and matmuls, in (0, 1]: "
        "one value for every IPU, or one per IPU of the replica",
    )
    parser.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        type=output_directory,
        help="write DIR/checkpoint.npz (params, optimiser state, step), renamed into place",
    )
    parser.add_argument(
        "--checkpoint-every",
        metavar="N",
        type=positive_int,
        help="checkpoint every N steps (a multiple of --device-iterations) and at the end",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from --checkpoint-dir's checkpoint up to --steps steps in all",
    )
    parser.add_argument(
        "--allow-new-data-order",
        action="store_true",
        help="with --resume: accept another replica count, micro-batch, accumulation, "
        "device iterations or seed (the steps from here on read other samples)",
    )
    args = parser.parse_args(argv)
    if args.allow_new_data_order and not args.resume:
        parser.error("--allow-new-data-order applies to --resume: add --resume or remove it.")
    if (args.checkpoint_every or args.resume) and not args.checkpoint_dir:
        parser.error("--checkpoint-every and --resume need --checkpoint-dir DIR: add it.")
    if args.checkpoint_every and args.checkpoint_every % args.device_iterations:
        parser.error(
            f"--checkpoint-every {args.checkpoint_every} must be a multiple of "
            f"--device-iterations {args.device_iterations}: checkpoints fall between calls."
        )
    if args.resume:
        check_resumable(parser, args)
    if args.steps < 1 or args.steps % args.device_iterations:
        parser.error(
            f"--steps {args.steps} must be a positive multiple of --device-iterations "
            f"{args.device_iterations} (one call runs device-iterations steps)."
        )
    return args


def main(argv: list[str] | None = None) -> dict:
    start = time.perf_counter()
    args = parse_args(argv)
    leader = popdist.getInstanceIndex() == 0
    # First, so the long phases (compiling the step) are named while they run.
    progress = popdist_emu.Progress(args.steps, enabled=leader)
    ipus_per_replica = popdist.getNumIpusPerReplica()
    strategy = execution_strategy(ipus_per_replica, args.strategy)
    try:
        amp = per_ipu_proportions(args.available_memory_proportion, ipus_per_replica)
    except ValueError as error:
        print(f"train.py: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    options = popdist_emu.Options(
        gradient_accumulation=args.gradient_accumulation,
        device_iterations=args.device_iterations,
        output_mode="all",
        replicated_tensor_sharding=args.replicated_tensor_sharding,
        offload_optimiser=args.offload_optimiser,
        prefetch_depth=args.prefetch_depth,
        execution_strategy=strategy,
        recomputation=args.recompute,
        available_memory_proportion=amp,
    )
    # Refused before any compile: a call's batch (x calls in flight) this host cannot hold.
    refuse_batch_unless_it_fits(
        "train.py",
        f"--gradient-accumulation {args.gradient_accumulation}",
        batch_shapes(options, args.micro_batch_size),
        args.prefetch_depth,
    )
    ckpt = args.checkpoint_dir if not popdist_emu.is_offline_mode() else ""
    try:  # the checkpoint directory claimed (one job per directory) before any compile
        if ckpt:
            popdist_emu.claim_checkpoint_dir(ckpt, options.job_dir)
        trainer = popdist_emu.Trainer(
            tutorial_loss if strategy is None else TUTORIAL_BLOCK_MODEL,
            optax.adamw(args.learning_rate),
            init_tutorial_params(args.seed),
            options,
        )
        if ckpt and args.resume:  # its shapes against the trainer's, before the step compiles
            popdist_emu.check_checkpoint(ckpt, trainer)
    except (NotImplementedError, popdist_emu.PipelineError, popdist_emu.CheckpointError) as err:
        print(f"train.py: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    report = {
        "replicas": options.num_total_replicas,
        "instances": options.num_instances,
        "steps": args.steps,
        "micro_batch_size": args.micro_batch_size,
        "gradient_accumulation": args.gradient_accumulation,
        "device_iterations": args.device_iterations,
        "global_batch": options.global_batch_size(args.micro_batch_size),
        "ipus_per_replica": ipus_per_replica,
        "strategy": args.strategy if strategy is not None else None,
        # What --replicated-tensor-sharding / --offload-optimiser buy and cost per replica.
        "optimiser_state_bytes_per_replica": trainer.lever_info.optimiser_state_bytes_per_replica,
        "sharding_domain_size": trainer.lever_info.sharding_domain_size,
        "offload_bytes_per_update": trainer.lever_info.offload_bytes_per_update,
    }
    shapes = batch_shapes(options, args.micro_batch_size)
    try:
        # Before any step, as Poplar refuses at compile time a graph that does not fit (an
        # oversized micro-batch from its shapes alone, before the step compiles). Offline
        # nothing trains: the host's part is measured on a bounded sample of batches.
        sample, sampled = sample_loader(options, args) if trainer.offline else (None, None)
        simulation = popdist_emu.simulate(
            trainer, shapes, name="digits-cnn", infeed_stats=sample, infeed_micro_batch_size=sampled
        )
    except hardware.OutOfMemoryError as error:
        print(error, file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    if trainer.offline:
        report |= offline_report(trainer, shapes, simulation.profile)
    else:
        result, stats = train(trainer, options, args, leader, progress)
        report |= result
        simulation = popdist_emu.with_infeed_stats(simulation, stats)
    popdist_emu.report_simulation(simulation, options)
    report["simulated_step_seconds"] = simulation.simulated_step_seconds
    report["samples_per_second"] = simulation.samples_per_second
    report["system"] = simulation.system.name
    report["wall_seconds"] = round(time.perf_counter() - start, 3)
    if leader:
        print(json.dumps(report), flush=True)
    return report


def batch_shapes(options: popdist_emu.Options, micro: int) -> tuple:
    """One call's batch as shapes, with the dtypes ``ReplicaLoader`` delivers the digits in."""
    lead = (options.device_iterations, options.gradient_accumulation, options.replication_factor)
    return (
        jax.ShapeDtypeStruct((*lead, micro, 8, 8, 1), jnp.float32),
        jax.ShapeDtypeStruct((*lead, micro), jnp.int32),
    )


def offline_report(trainer: popdist_emu.Trainer, shapes: tuple, profile) -> dict:
    """The step's cost from shapes (no data, no collective): what simulate() compiled."""
    compiled = trainer.compile(shapes)  # compiled once: simulate() already compiled them
    return {
        "offline": True,
        "first_loss": None,
        "final_loss": None,
        "test_accuracy": None,
        # One micro-batch of one replica (all stages of a pipeline), from XLA's analysis.
        "micro_step_flops": float(profile.grad_flops),
        "allreduce_bytes": compiled.collectives[0].bytes,
    }


# Samples per call the offline host measure prepares at most: the host's work is per sample,
# so a few thousand measure it, whatever the micro-batch being sized.
SAMPLE_BOUND = 4096


def sample_loader(
    options: popdist_emu.Options, args: argparse.Namespace, calls: int = 3
) -> tuple[popdist_emu.InfeedStats, int]:
    """What the training's infeed would measure, from its first ``calls`` batches alone, at
    a micro-batch bounded so that a call prepares at most ``SAMPLE_BOUND`` samples: the
    stats and the micro-batch they were measured at (for ``with_infeed_stats``)."""
    per_call = options.device_iterations * options.gradient_accumulation
    per_call *= options.replication_factor
    micro = max(1, min(args.micro_batch_size, SAMPLE_BOUND // per_call))
    data = popdist_emu.load_digits_split(seed=0)
    loader = popdist_emu.ReplicaLoader(
        (data.train_images, data.train_labels), micro, options, seed=args.seed
    )
    with popdist_emu.Infeed(loader.batch, calls, prefetch_depth=options.prefetch_depth) as feed:
        for _ in feed:
            pass
    return feed.stats, micro


def train(
    trainer: popdist_emu.Trainer,
    options: popdist_emu.Options,
    args: argparse.Namespace,
    leader: bool,
    progress: popdist_emu.Progress,
) -> tuple:
    """Trains for ``args.steps`` steps and evaluates on the held-out digits.

    Returns:
        ``(results, infeed_stats)``: the figures for the JSON line, and what the infeed
        delivered (host bytes for the hardware model).
    """
    data = popdist_emu.load_digits_split(seed=0)
    loader = popdist_emu.ReplicaLoader(
        (data.train_images, data.train_labels), args.micro_batch_size, options, seed=args.seed
    )
    calls = args.steps // options.device_iterations
    meta = _resume_values(args)
    first = 0
    if args.resume:
        # The loader is a pure function of the call index: the step is its position.
        first = (
            popdist_emu.restore_checkpoint(args.checkpoint_dir, trainer)["step"]
            // args.device_iterations
        )
    losses = []
    t0 = time.perf_counter()

    def batch(call: int) -> tuple:
        return loader.batch(first + call)

    # Batches are pure functions of the call index, prepared by an infeed thread while the
    # replicas compute (PopTorch's prefetch depth).
    with popdist_emu.Infeed(batch, calls - first, prefetch_depth=options.prefetch_depth) as feed:
        for one_call in feed:
            losses.extend(np.atleast_1d(trainer.step(one_call)).tolist())
            progress.update(trainer.steps_done, losses[-1])
            every = args.checkpoint_every
            if every and trainer.steps_done % every == 0 and trainer.steps_done < args.steps:
                popdist_emu.save_checkpoint(args.checkpoint_dir, trainer, meta)
        stats = feed.stats
    if args.checkpoint_dir:
        popdist_emu.save_checkpoint(args.checkpoint_dir, trainer, meta)
    progress.close()
    train_seconds = time.perf_counter() - t0
    params = trainer.params
    if args.save:
        popdist.execute_on_instances({0}, save_params, args.save, flat_params(params))
    test_accuracy = accuracy(params, data.test_images, data.test_labels) if leader else None
    results = {
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "test_accuracy": test_accuracy,
        "epochs": round(args.steps / loader.steps_per_epoch, 2),
        "train_seconds": round(train_seconds, 3),
    }
    return results, stats


if __name__ == "__main__":
    main()
