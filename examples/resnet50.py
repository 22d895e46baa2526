"""ResNet-50 (He et al. 2016, v1.5) in plain JAX, and its MLPerf-style offline run.

The model is written with ``jax.lax.conv_general_dilated`` and a hand-written batch norm so
the example needs nothing but JAX and optax. It exists to give the hardware model a real,
large training step to cost: ``main()`` lowers and compiles the per-replica gradient and the
optimiser update (never runs them) and reports the simulated IPU-POD step.

Run it as the MLPerf v1.1 POD16 submission was run::

    poprun-emu --offline-mode --num-replicas 16 --num-instances 8 examples/resnet50.py \
        --micro-batch-size 20 --gradient-accumulation 10

References:
    He et al., "Deep Residual Learning for Image Recognition", CVPR 2016 (bottleneck
    blocks, stride on the 3x3 conv as in the "v1.5" variant MLPerf uses).
    MLPerf Training v1.1, Graphcore ResNet-50 submission (micro-batch 20, LARS, FP16).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import optax

IMAGE_SIZE = 224
NUM_CLASSES = 1000
# (bottleneck width, blocks, stride of the first block) for the four stages of ResNet-50.
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
EXPANSION = 4
_DIMS = ("NHWC", "HWIO", "NHWC")
# PopLibs' availableMemoryProportion of Graphcore's MLPerf v1.1 ResNet-50 submissions, with
# half partials (mlcommons/training_results_v1.1, Graphcore/benchmarks/resnet/implementations/
# tensorflow/configs.yml, mk2_resnet50_mlperf_pod16_lars and the pod64/128/256 configs that
# inherit it: available_memory_proportion [0.15], enable_half_partials True).
MLPERF_AVAILABLE_MEMORY_PROPORTION = 0.15


def _conv_init(key, kh, kw, cin, cout, dtype):
    # He-normal init: keeps activations' variance constant through ReLU layers.
    std = (2.0 / (kh * kw * cin)) ** 0.5
    return (std * jax.random.normal(key, (kh, kw, cin, cout), jnp.float32)).astype(dtype)


def _bn_init(channels, dtype):
    return {"scale": jnp.ones((channels,), dtype), "bias": jnp.zeros((channels,), dtype)}


@functools.partial(jax.jit, static_argnames="dtype")
def init_params(key: jax.Array, dtype=jnp.float16) -> dict:
    """ResNet-50 parameters (about 25.6 M) as a nested dict of arrays of ``dtype``.

    One jitted program: drawn eagerly, every leaf shape would compile its own random draw.
    """
    keys = iter(jax.random.split(key, 64))
    params = {
        "stem": {"conv": _conv_init(next(keys), 7, 7, 3, 64, dtype), "bn": _bn_init(64, dtype)}
    }
    cin = 64
    for s, (width, blocks, _) in enumerate(STAGES):
        for b in range(blocks):
            cout = width * EXPANSION
            block = {
                "conv1": _conv_init(next(keys), 1, 1, cin, width, dtype),
                "bn1": _bn_init(width, dtype),
                "conv2": _conv_init(next(keys), 3, 3, width, width, dtype),
                "bn2": _bn_init(width, dtype),
                "conv3": _conv_init(next(keys), 1, 1, width, cout, dtype),
                "bn3": _bn_init(cout, dtype),
            }
            if b == 0:
                block["proj"] = _conv_init(next(keys), 1, 1, cin, cout, dtype)
                block["proj_bn"] = _bn_init(cout, dtype)
            params[f"stage{s}_block{b}"] = block
            cin = cout
    wkey = next(keys)
    params["head"] = {
        "w": (jax.random.normal(wkey, (cin, NUM_CLASSES), jnp.float32) * 0.01).astype(dtype),
        "b": jnp.zeros((NUM_CLASSES,), dtype),
    }
    return params


def _conv(x, w, stride=1):
    pad = "SAME" if w.shape[0] > 1 else "VALID"
    return jax.lax.conv_general_dilated(x, w, (stride, stride), pad, dimension_numbers=_DIMS)


def _batch_norm(x, p, eps=1e-5):
    # Training-mode batch norm over (N, H, W); statistics in float32 for FP16 stability.
    x32 = x.astype(jnp.float32)
    mean = x32.mean(axis=(0, 1, 2))
    var = x32.var(axis=(0, 1, 2))
    y = (x32 - mean) * jax.lax.rsqrt(var + eps)
    return (y * p["scale"].astype(jnp.float32) + p["bias"].astype(jnp.float32)).astype(x.dtype)


def _block(x, p, stride):
    shortcut = x
    if "proj" in p:
        shortcut = _batch_norm(_conv(x, p["proj"], stride), p["proj_bn"])
    y = jax.nn.relu(_batch_norm(_conv(x, p["conv1"]), p["bn1"]))
    y = jax.nn.relu(_batch_norm(_conv(y, p["conv2"], stride), p["bn2"]))
    y = _batch_norm(_conv(y, p["conv3"]), p["bn3"])
    return jax.nn.relu(y + shortcut)


def _stem(images, p):
    x = images.astype(p["conv"].dtype)
    x = jax.nn.relu(_batch_norm(_conv(x, p["conv"], 2), p["bn"]))
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")


def forward(params: dict, images: jax.Array, *, recomputation: bool = False) -> jax.Array:
    """Logits of ``images`` (N, 224, 224, 3); ``recomputation`` checkpoints the stem and
    each block, keeping only their inputs for the backward pass."""
    stem = jax.checkpoint(_stem) if recomputation else _stem
    x = stem(images, params["stem"])
    block = jax.checkpoint(_block, static_argnums=(2,)) if recomputation else _block
    for s, (_, blocks, stride) in enumerate(STAGES):
        for b in range(blocks):
            x = block(x, params[f"stage{s}_block{b}"], stride if b == 0 else 1)
    x = x.astype(jnp.float32).mean(axis=(1, 2))
    head = params["head"]
    return x @ head["w"].astype(jnp.float32) + head["b"].astype(jnp.float32)


def loss_fn(params: dict, images: jax.Array, labels: jax.Array, recomputation: bool = False):
    """Mean softmax cross-entropy of integer ``labels``."""
    logits = forward(params, images, recomputation=recomputation)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def make_step_functions(*, recomputation: bool = False, learning_rate: float = 0.1):
    """The per-replica gradient function and the optimiser update, both jitted.

    Returns:
        ``(grad_fn, update_fn, optimiser)`` with ``grad_fn(params, images, labels) -> grads``
        and ``update_fn(params, opt_state, grads) -> (params, opt_state)``; LARS as MLPerf.
    """
    optimiser = optax.lars(learning_rate, weight_decay=5e-5, momentum=0.9)

    @jax.jit
    def grad_fn(params, images, labels):
        return jax.grad(loss_fn)(params, images, labels, recomputation)

    @jax.jit
    def update_fn(params, opt_state, grads):
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return grad_fn, update_fn, optimiser


def example_shapes(micro_batch_size: int, dtype=jnp.float16):
    """``(params, opt_state, images, labels)`` as ShapeDtypeStructs: nothing is allocated."""
    _, _, optimiser = make_step_functions()
    params = jax.eval_shape(lambda: init_params(jax.random.key(0), dtype))
    opt_state = jax.eval_shape(optimiser.init, params)
    # Images cross the host link as uint8, as the MLPerf infeed sends them.
    images = jax.ShapeDtypeStruct((micro_batch_size, IMAGE_SIZE, IMAGE_SIZE, 3), jnp.uint8)
    labels = jax.ShapeDtypeStruct((micro_batch_size,), jnp.int32)
    return params, opt_state, images, labels


def profile(
    micro_batch_size: int,
    gradient_accumulation: int = 1,
    device_iterations: int = 1,
    *,
    dtype=jnp.float16,
    recomputation: bool = True,
    available_memory_proportion: float | dict = MLPERF_AVAILABLE_MEMORY_PROPORTION,
    layout=None,
):
    """The hardware.StepProfile of one ResNet-50 training step (compile only, never run).

    Convolutions use half partials under ``available_memory_proportion`` 0.15 by default,
    as Graphcore's MLPerf v1.1 ResNet-50 configurations set them (see
    ``MLPERF_AVAILABLE_MEMORY_PROPORTION``); PopLibs' own default is 0.6. The gradients'
    all-reduce is recorded with the method gcl runs for it under ``layout`` (the job's;
    None: one replica).
    """
    from popdist_emu import StepSettings, profile_step

    grad_fn, update_fn, _ = make_step_functions(recomputation=recomputation)
    params, opt_state, images, labels = example_shapes(micro_batch_size, dtype)
    return profile_step(
        grad_fn,
        update_fn,
        loss_fn=lambda p, x, y: loss_fn(p, x, y, recomputation),
        params=params,
        opt_state=opt_state,
        batch=(images, labels),
        settings=StepSettings(
            micro_batch_size=micro_batch_size,
            gradient_accumulation=gradient_accumulation,
            device_iterations=device_iterations,
            recomputation=recomputation,
            name="ResNet-50",
            available_memory_proportion=available_memory_proportion,
            partials_type="half" if jnp.dtype(dtype).itemsize <= 2 else "float",
        ),
        layout=layout,
    )


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    from popdist_emu.arguments import ArgumentParser, positive_int

    # Every value is checked here, before any JAX work: one line and exit code 2 if bad.
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batch-size", type=positive_int, default=20)
    parser.add_argument("--gradient-accumulation", type=positive_int, default=1)
    parser.add_argument("--device-iterations", type=positive_int, default=1)
    parser.add_argument("--precision", choices=("float16", "float32"), default="float16")
    parser.add_argument(
        "--no-recomputation",
        dest="recomputation",
        action="store_false",
        help="keep every activation for the backward pass instead of recomputing per block",
    )
    parser.add_argument(
        "--available-memory-proportion",
        type=float,
        default=MLPERF_AVAILABLE_MEMORY_PROPORTION,
        help="PopLibs' availableMemoryProportion for every convolution and matmul (0, 1]; "
        "default 0.15, the MLPerf v1.1 submissions' setting",
    )
    args = parser.parse_args(argv)
    if not 0 < args.available_memory_proportion <= 1:
        parser.error(
            f"--available-memory-proportion {args.available_memory_proportion} is outside "
            "(0, 1]: pass e.g. 0.15 (the default)"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Profiles the step, simulates it on the job's system and reports it.

    Reports through the runtime's glue (``popdist_emu.simulate_profile`` and
    ``report_simulation`` of the job PopRun gave, ``popdist_emu.Options()``), as every
    example does: the summary is printed by instance 0,
    ``--report-dir`` gets ``summary.json`` and ``trace.json``, and a step that does not fit
    is refused with Poplar's ``Out of memory:`` and exit code 1.
    """
    import hardware
    import popdist_emu

    args = _parse(argv)
    job = popdist_emu.Options(gradient_accumulation=args.gradient_accumulation)  # PopRun's
    if job.instance_index == 0:
        popdist_emu.show_phases()  # XLA takes a minute or more on this step: say so
    step = profile(
        args.micro_batch_size,
        args.gradient_accumulation,
        args.device_iterations,
        dtype=jnp.dtype(args.precision),
        recomputation=args.recomputation,
        available_memory_proportion=args.available_memory_proportion,
        layout=job.layout,
    )
    try:
        simulation = popdist_emu.simulate_profile(step, job)
    except hardware.OutOfMemoryError as error:
        # Poplar refuses to compile a graph that does not fit; so does the emulator.
        print(error, file=sys.stderr, flush=True)
        return 1
    popdist_emu.report_simulation(simulation, job)
    if job.instance_index == 0:
        print(
            json.dumps(
                {
                    "system": simulation.system.name,
                    "replicas": simulation.layout.num_replicas,
                    "simulated_step_seconds": simulation.simulated_step_seconds,
                    "samples_per_second": simulation.samples_per_second,
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
