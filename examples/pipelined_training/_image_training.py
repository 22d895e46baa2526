"""What the pipelined image examples (``vit.py``, ``resnext_training.py``,
``efficientnet_training.py``) share: building the trainer from their arguments, simulating
the configuration, training on the handwritten digits, and the report's simulated figures."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import popdist

import hardware
import popdist_emu
from pipelined_training._flags import (
    DTYPES,
    add_training_arguments,
    check_steps,
    pipeline_options,
    refuse,
)
from popdist_emu import arguments


def image_parser(doc: str, models: Iterable[str]) -> arguments.ArgumentParser:
    """The image examples' parser (described by the first paragraph of ``doc``), with the
    flags every one of them has: ``--model`` (one of ``models``, ``tiny`` by default) and
    ``--micro-batch-size``."""
    parser = arguments.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--model", choices=tuple(models), default="tiny")
    parser.add_argument("--micro-batch-size", type=arguments.positive_int, default=8)
    return parser


def parse_image_arguments(parser: Any, argv: Any) -> Any:
    """The example's arguments with ``--precision`` (fp16, the tiny model fp32 by default)
    and the step count checked against the accumulation."""
    parser.add_argument("--precision", choices=tuple(DTYPES), help="default: fp16, tiny fp32")
    args = parser.parse_args(argv)
    check_steps(parser, args)
    if args.precision is None:
        args.precision = "fp32" if args.model == "tiny" else "fp16"
    return args


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """The examples' loss: the mean softmax cross-entropy of ``logits``, in float32."""
    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), labels
    ).mean()


def chain_logits(blocks: list, head_logits: Callable) -> Callable:
    """Jitted ``(params, images) -> logits`` for evaluation: ``blocks`` (name, block) in
    order, each ``(params, (x, labels)) -> (x, labels)``, then ``head_logits(params, x)``."""

    def logits(params: Any, images: jax.Array) -> jax.Array:
        carry = (images, jnp.zeros(images.shape[0], jnp.int32))
        for _, block in blocks:
            carry = block(params, carry)
        return head_logits(params, carry[0])

    return jax.jit(logits)


def add_convolution_arguments(parser: Any, *, learning_rate: float) -> None:
    """The flags of the pipelined CNN examples beyond their placement: the shared training
    flags, 90 steps by default."""
    add_training_arguments(
        parser,
        steps=90,
        learning_rate=learning_rate,
        proportion_help="PopLibs' default 0.6 when not set",
    )


def _batch_shapes(image: int, channels: int, options: Any, micro: int, dtype: Any) -> tuple:
    """Shapes of one call's images and labels for every replica: ``device_iterations x
    gradient_accumulation x replication_factor`` micro-batches of ``micro`` images."""
    lead = (options.device_iterations, options.gradient_accumulation, options.replication_factor)
    return (
        jax.ShapeDtypeStruct((*lead, micro, image, image, channels), dtype),
        jax.ShapeDtypeStruct((*lead, micro), jnp.int32),
    )


def stages_per_ipu(first: str, names: list[str], last: str, counts: list[int]) -> tuple:
    """One ``popdist_emu.Stage`` per IPU: ``first`` (the stem or embeddings) with IPU 0's
    share of ``names``, each IPU's ``counts[i]`` blocks in order, ``last`` (the head) with the
    last IPU's."""
    out, i = [], 0
    for ipu, count in enumerate(counts):
        blocks = ([first] if ipu == 0 else []) + names[i : i + count]
        if ipu == len(counts) - 1:
            blocks.append(last)
        out.append(popdist_emu.Stage(*blocks, ipu=ipu))
        i += count
    return tuple(out)


def build_and_run(
    args: Any,
    start: float,
    *,
    program: str,
    name: str,
    stages: tuple,
    placement: dict,
    model: Any,
    optimiser: Any,
    shapes: Callable[[Any], Any],
    init: Callable[[Any, jax.Array], Any],
    image: tuple[int, int],
    logits: Callable,
    **options: Any,
) -> dict:
    """An example's ``main`` once its own arguments are read: the ``Options`` for its
    pipeline ``stages``, the weights in ``--precision``'s dtype (``shapes(dtype)`` offline,
    where nothing is allocated, else ``init(dtype, key)``), the trainer of ``model``, the
    simulation and the report. A placement the pipeline refuses ends ``program`` with exit
    status 2.

    Args:
        image: the images' side and channels (``--micro-batch-size`` of them per micro-batch).
        **options: further ``Options`` settings (of :func:`pipeline_options`).
    """
    opts = pipeline_options(program, args, stages, **options)
    dtype = DTYPES[args.precision]
    param_shapes = shapes(dtype)
    offline = popdist_emu.is_offline_mode()
    params = param_shapes if offline else init(dtype, jax.random.PRNGKey(args.seed))
    try:
        trainer = popdist_emu.Trainer(model, optimiser, params, opts)
    except popdist_emu.PipelineError as err:
        refuse(program, str(err))
    batch = _batch_shapes(*image, opts, args.micro_batch_size, dtype)
    simulation = _simulate(trainer, batch, name)
    return _run(
        args,
        trainer,
        simulation,
        placement=placement,
        param_shapes=param_shapes,
        logits=logits,
        dtype=dtype,
        start=start,
    )


def _simulate(trainer: Any, shapes: Any, name: str) -> hardware.StepSimulation:
    """The configuration's simulated step; out of memory ends the program (exit 1) with
    Poplar's message."""
    try:
        return popdist_emu.simulate(trainer, shapes, name=name)
    except hardware.OutOfMemoryError as error:
        print(error, file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def _train_on_digits(
    trainer: Any,
    options: Any,
    logits: Callable,
    micro_batch: int,
    steps: int,
    dtype: Any,
    seed: int,
) -> dict:
    """``steps`` steps on the digits shipped with scikit-learn, then the test accuracy of
    ``logits(params, images)``: the first and final loss and the accuracy."""
    data = popdist_emu.load_digits_split(seed=0)
    loader = popdist_emu.ReplicaLoader(
        (data.train_images.astype(dtype), data.train_labels), micro_batch, options, seed=seed
    )
    losses = []
    for call in range(steps // options.device_iterations):
        losses.extend(np.atleast_1d(trainer.step(loader.batch(call))).tolist())
    scores = logits(trainer.params, jnp.asarray(data.test_images, dtype))
    accuracy = float(np.mean(np.argmax(np.asarray(scores), -1) == data.test_labels))
    return {"first_loss": losses[0], "final_loss": losses[-1], "accuracy": accuracy}


def _run(
    args: Any,
    trainer: Any,
    simulation: hardware.StepSimulation,
    *,
    placement: dict,
    param_shapes: Any,
    logits: Callable,
    dtype: Any,
    start: float,
) -> dict:
    """The example's report: its configuration (``placement`` names what runs on each IPU),
    the digits trained on for real unless offline, the simulation reported and its figures;
    printed as the last line of instance 0."""
    options = trainer.options
    report = {
        "model": args.model,
        "replicas": options.num_total_replicas,
        "instances": options.num_instances,
        "ipus_per_replica": popdist.getNumIpusPerReplica(),
        **placement,
        "micro_batch_size": args.micro_batch_size,
        "gradient_accumulation": options.gradient_accumulation,
        "precision": args.precision,
        "parameters": sum(math.prod(x.shape) for x in jax.tree.leaves(param_shapes)),
        "offline": popdist_emu.is_offline_mode(),
    }
    if not report["offline"]:
        report |= _train_on_digits(
            trainer, options, logits, args.micro_batch_size, args.steps, dtype, args.seed
        )
    popdist_emu.report_simulation(simulation, options)
    report |= {
        "simulated_step_seconds": simulation.simulated_step_seconds,
        "samples_per_second": simulation.samples_per_second,
        "bubble_fraction": simulation.replica.bubble_fraction,
        "balance": simulation.replica.balance,
        "fixed_cost_share": hardware.fixed_cost_share(simulation),
        "memory_per_ipu": [m.total for m in simulation.replica.ipu_memory],
        "system": simulation.system.name,
        "wall_seconds": round(time.perf_counter() - start, 3),
    }
    if popdist.getInstanceIndex() == 0:
        print(json.dumps(report), flush=True)
    return report
