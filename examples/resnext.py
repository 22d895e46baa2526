"""ResNeXt inference on one IPU, offline from shapes: the available-memory-proportion journeys.

The technical note on the available memory proportion tunes a torchvision ResNeXt for
inference on one Mk2 IPU. This example is that model in plain JAX (ResNeXt-101 32x8d by
default: bottleneck blocks whose 3x3 convolution has 32 groups), compiled from shapes,
never run, and simulated with the convolution planner model:

- use case 1, fitting the model: ``--available-memory-proportion P`` plans every
  convolution and matmul under P, prints Poplar's warning for each operation the planner
  had to plan for minimum memory, and reports the step or refuses it with
  ``Out of memory:`` (exit 1), naming the worst tile;
- use case 2, the best throughput: ``--sweep`` profiles each ``--micro-batch-sizes`` once
  and prints the note's table of throughput (images/s) for every batch size and
  ``--proportions``, ``OOM`` where it does not fit, and the best cell.

Run::

    python examples/resnext.py --micro-batch-size 16 --available-memory-proportion 0.35
    python examples/resnext.py --sweep

References:
    Xie et al., "Aggregated Residual Transformations for Deep Neural Networks", CVPR 2017
    (ResNeXt, cardinality 32); torchvision ``resnext101_32x8d`` (layer counts and widths);
    Graphcore, "Optimising Temporary Memory Usage for Convolutions and Matmuls on the IPU"
    (the journeys and Table 2.1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from hardware import DEFAULT_AVAILABLE_MEMORY_PROPORTION

IMAGE_SIZE = 224
NUM_CLASSES = 1000
DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
_DIMS = ("NHWC", "HWIO", "NHWC")


def _conv_init(key, kh, kw, cin, cout, dtype):
    std = (2.0 / (kh * kw * cin)) ** 0.5
    return (std * jax.random.normal(key, (kh, kw, cin, cout), jnp.float32)).astype(dtype)


def init_params(key, *, depth=101, groups=32, width_per_group=8, dtype=jnp.float16) -> dict:
    """ResNeXt parameters (101 32x8d: about 88.8 M) as a nested dict of ``dtype`` arrays.

    Batch norm is folded into each convolution's bias, as for inference.
    """
    keys = iter(jax.random.split(key, 200))
    params = {"stem": {"w": _conv_init(next(keys), 7, 7, 3, 64, dtype), "b": jnp.zeros(64, dtype)}}
    cin = 64
    for s, blocks in enumerate(DEPTHS[depth]):
        planes = 64 * 2**s
        width = planes * width_per_group // 64 * groups
        cout = planes * 4
        for b in range(blocks):
            block = {
                "w1": _conv_init(next(keys), 1, 1, cin, width, dtype),
                "w2": _conv_init(next(keys), 3, 3, width // groups, width, dtype),
                "w3": _conv_init(next(keys), 1, 1, width, cout, dtype),
                "b1": jnp.zeros(width, dtype),
                "b2": jnp.zeros(width, dtype),
                "b3": jnp.zeros(cout, dtype),
            }
            if b == 0:
                block["proj"] = _conv_init(next(keys), 1, 1, cin, cout, dtype)
            params[f"stage{s}_block{b}"] = block
            cin = cout
    params["head"] = {
        "w": (jax.random.normal(next(keys), (cin, NUM_CLASSES)) * 0.01).astype(dtype),
        "b": jnp.zeros(NUM_CLASSES, dtype),
    }
    return params


def _conv(x, w, stride=1, groups=1):
    pad = "SAME" if w.shape[0] > 1 else "VALID"
    return jax.lax.conv_general_dilated(
        x, w, (stride, stride), pad, dimension_numbers=_DIMS, feature_group_count=groups
    )


def forward(params: dict, images: jax.Array) -> jax.Array:
    """Logits of ``images`` (N, 224, 224, 3) in the weights' dtype."""
    dtype = params["stem"]["w"].dtype
    x = jax.nn.relu(_conv(images.astype(dtype), params["stem"]["w"], 2) + params["stem"]["b"])
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    s = 0
    while f"stage{s}_block0" in params:
        b = 0
        while f"stage{s}_block{b}" in params:
            p = params[f"stage{s}_block{b}"]
            stride = 2 if (b == 0 and s > 0) else 1
            groups = p["w2"].shape[3] // p["w2"].shape[2]
            shortcut = _conv(x, p["proj"], stride) if "proj" in p else x
            y = jax.nn.relu(_conv(x, p["w1"]) + p["b1"])
            y = jax.nn.relu(_conv(y, p["w2"], stride, groups) + p["b2"])
            x = jax.nn.relu(_conv(y, p["w3"]) + p["b3"] + shortcut)
            b += 1
        s += 1
    x = x.mean(axis=(1, 2))
    return x @ params["head"]["w"] + params["head"]["b"]


def profile(
    micro_batch_size: int,
    *,
    depth: int = 101,
    available_memory_proportion=0.6,
    precision: str = "float32",
):
    """The ``hardware.StepProfile`` of one inference step (compiled from shapes, never run).

    ``precision`` defaults to float32, torchvision's (and the note's PyTorch demo's) weights.
    """
    from popdist_emu import StepSettings, profile_step

    dtype = jnp.dtype(precision)
    params = jax.eval_shape(lambda: init_params(jax.random.key(0), depth=depth, dtype=dtype))
    images = jax.ShapeDtypeStruct((micro_batch_size, IMAGE_SIZE, IMAGE_SIZE, 3), jnp.uint8)
    step = profile_step(
        jax.jit(forward),
        None,
        params=params,
        batch=(images,),
        settings=StepSettings(
            micro_batch_size=micro_batch_size,
            name=f"ResNeXt-{depth} 32x8d inference",
            available_memory_proportion=available_memory_proportion,
        ),
        collectives=(),
    )
    # Inference keeps nothing for a backward pass: what is live between operations is the
    # largest operation's input and output (the profile's temporaries) and the planner's
    # temporary memory, not XLA's CPU buffer total.
    return step.replace(activation_bytes=0)


def _job():
    """One replica on a POD16 (the technical note's), reporting where ``poprun-emu`` asks."""
    import hardware
    import popdist_emu

    launched = popdist_emu.Options()
    return popdist_emu.Options(
        layout=hardware.ReplicaLayout(1),
        system="pod16",
        report_dir=launched.report_dir,
        command=launched.command,
    )


def _simulate(step, job=None):
    import popdist_emu

    return popdist_emu.simulate_profile(step, job or _job())


def sweep(
    batch_sizes: Sequence[int],
    proportions: Sequence[float],
    depth: int = 101,
    precision: str = "float32",
) -> dict:
    """Images/s (or None when out of memory) for every batch size and proportion."""
    import hardware

    table: dict = {}
    for batch in batch_sizes:
        step = profile(batch, depth=depth, precision=precision)
        for amp in proportions:
            try:
                sim = _simulate(step.replace(available_memory_proportion=amp))
                table[(batch, amp)] = sim.samples_per_second
            except hardware.OutOfMemoryError:
                table[(batch, amp)] = None
    return table


def format_table(table: dict) -> str:
    """The note's Table 2.1: rows are batch sizes, columns proportions, cells images/s."""
    batches = sorted({b for b, _ in table})
    amps = sorted({a for _, a in table})
    best = max((k for k, v in table.items() if v is not None), key=lambda k: table[k], default=None)
    lines = ["bs \\ amp " + "".join(f"{a:>9g}" for a in amps)]
    for b in batches:
        cells = []
        for a in amps:
            v = table[(b, a)]
            text = "OOM" if v is None else f"{v:,.0f}"
            cells.append(f"{text:>8}" + ("*" if (b, a) == best else " "))
        lines.append(f"{b:>9} " + "".join(cells))
    if best is not None:
        lines.append(
            f"best: batch size {best[0]} with availableMemoryProportion {best[1]:g} "
            f"({table[best]:,.0f} images/s)"
        )
    return "\n".join(lines)


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument(
        "--available-memory-proportion", type=float, default=DEFAULT_AVAILABLE_MEMORY_PROPORTION
    )
    parser.add_argument("--depth", type=int, choices=sorted(DEPTHS), default=101)
    parser.add_argument("--precision", choices=("float16", "float32"), default="float32")
    parser.add_argument("--sweep", action="store_true", help="print the batch x proportion table")
    parser.add_argument("--micro-batch-sizes", type=int, nargs="+", default=[4, 8, 12, 16, 20])
    parser.add_argument(
        "--proportions", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.35, 0.6, 0.8]
    )
    args = parser.parse_args(argv)
    for value in [args.available_memory_proportion, *args.proportions]:
        if not 0 < value <= 1:
            parser.error(f"available memory proportion {value} is outside (0, 1]: pass e.g. 0.6")
    for value in [args.micro_batch_size, *args.micro_batch_sizes]:
        if value < 1:
            parser.error(f"micro-batch size {value} must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Use case 1 (one proportion) or, with ``--sweep``, use case 2 (the table)."""
    import hardware
    import popdist_emu

    args = _parse(argv)
    if args.sweep:
        table = sweep(args.micro_batch_sizes, args.proportions, args.depth, args.precision)
        print(format_table(table))
        return 0
    step = profile(
        args.micro_batch_size,
        depth=args.depth,
        available_memory_proportion=args.available_memory_proportion,
        precision=args.precision,
    )
    job = _job()
    try:
        simulation = _simulate(step, job)
    except hardware.OutOfMemoryError as error:
        print(error, file=sys.stderr, flush=True)
        return 1
    popdist_emu.report_simulation(simulation, job)
    print(json.dumps({"samples_per_second": simulation.samples_per_second}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
