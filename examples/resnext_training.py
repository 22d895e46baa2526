"""ResNeXt training in plain JAX, pipelined over the IPUs of a replica.

Graphcore's TensorFlow CNNs train ResNeXt-101 (32x4d: 32 groups of 4 channels in the first
stage's 3x3 convolutions) over 2 IPUs per replica; its Bow-POD16 benchmark configuration
(``configs.yml`` key ``mk2_resnext101_16ipus``: 8 replicas, micro-batch 6, gradient
accumulation 16, the pipeline split after ``stage3/unit4/relu``, recomputation, half partials,
group norm) runs offline (compile only, from shapes) as::

    poprun-emu --offline-mode yes --system bow-pod16 --num-replicas 8 --ipus-per-replica 2 \\
        examples/resnext_training.py --model 101 --micro-batch-size 6 \\
        --gradient-accumulation 16 --split-after stage3unit4 --recompute \\
        --enable-half-partials

or the tiny model trains for real on the handwritten digits shipped with scikit-learn::

    poprun-emu --num-replicas 2 --ipus-per-replica 2 examples/resnext_training.py

The model: a 7x7 stride-2 stem and 3x3 max pool (the tiny model: a 3x3 stem, no pool), then
bottleneck units (1x1 convolution, grouped 3x3 convolution carrying the stride, 1x1
convolution to four times the planes, each followed by a group norm, with a projection
shortcut where the shape changes: Graphcore's shortcut type B), global average pooling and
the classifier, trained with momentum SGD on the cross-entropy. Blocks: ``stem``, one per
unit (``stage1unit1`` ...) and ``head``; ``--split-after`` names the last block of IPU 0
(Graphcore's ``pipeline_splits``), the rest goes on IPU 1, or ``--units-per-ipu`` spreads
the units over any number of IPUs.

The last line printed (by instance 0) is a JSON object with the simulated throughput.

References:
    Xie et al., "Aggregated Residual Transformations for Deep Neural Networks", CVPR 2017
    (ResNeXt-101 32x4d: units 3, 4, 23, 3); Wu and He, "Group Normalization", ECCV 2018;
    graphcore/examples (and its copy in mlcommons/training_results_v2.0,
    ``Graphcore/benchmarks/resnet/implementations/tensorflow``): ``configs.yml`` and
    ``Models/resnext.py`` (cardinality 32, group dimension 4, group norm of 32 groups on
    ImageNet).
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from typing import NoReturn

import jax
import jax.numpy as jnp
import optax
import pipelined_training
import popdist
import resnext

import popdist_emu

# (image, channels, stem: kernel, stride, pool; units per stage, groups, group width,
#  first planes, norm groups, classes)
CONFIGS = {
    "tiny": (8, 1, (3, 1, False), (1, 1), 4, 2, 8, 4, 10),
    "101": (224, 3, (7, 2, True), resnext.DEPTHS[101], 32, 4, 64, 32, 1000),
}
_DIMS = ("NHWC", "HWIO", "NHWC")


def refuse(message: str) -> NoReturn:
    pipelined_training.refuse("resnext_training.py", message)


def unit_names(model: str) -> list[str]:
    """Every bottleneck unit's block name, in order (``stage1unit1`` ...)."""
    units = CONFIGS[model][3]
    return [f"stage{s + 1}unit{u + 1}" for s, n in enumerate(units) for u in range(n)]


def _unit_plan(model: str):
    """Per unit: name, input channels, grouped width, output channels, stride."""
    _, _, _, units, groups, group_width, planes, _, _ = CONFIGS[model]
    cin, plan = planes, []
    for s, n in enumerate(units):
        width, cout = groups * group_width * 2**s, planes * 4 * 2**s
        for u in range(n):
            stride = 2 if (u == 0 and s > 0) else 1
            plan.append((f"stage{s + 1}unit{u + 1}", cin, width, cout, stride))
            cin = cout
    return plan


def _shapes(model: str, dtype) -> dict:
    _, channels, (kernel, _, _), _, groups, _, planes, _, classes = CONFIGS[model]

    def conv(kh, cin, cout, g=1):
        return {"w": (kh, kh, cin // g, cout), "scale": (cout,), "bias": (cout,)}

    shapes = {"stem": conv(kernel, channels, planes)}
    for name, cin, width, cout, stride in _unit_plan(model):
        unit = {
            "conv1": conv(1, cin, width),
            "conv2": conv(3, width, width, groups),
            "conv3": conv(1, width, cout),
        }
        if stride != 1 or cin != cout:
            unit["shortcut"] = conv(1, cin, cout)
        shapes[name] = unit
    shapes["head"] = {"w": (_unit_plan(model)[-1][3], classes), "b": (classes,)}
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s, dtype), shapes, is_leaf=lambda x: isinstance(x, tuple)
    )


def init_params(model: str, dtype, key: jax.Array) -> dict:
    """He-normal convolutions (std sqrt(2 / fan-in)), unit norm scales, zero shifts, a
    zero-initialised classifier."""

    def std(name: str, shape: tuple) -> float:
        return math.sqrt(2.0 / math.prod(shape[:3])) if len(shape) == 4 else 0.0

    return pipelined_training.init_from_shapes(_shapes(model, dtype), key, std)


def _conv_norm(p, x, norm_groups: int, *, stride: int = 1, groups: int = 1, relu: bool = True):
    """Convolution (``SAME`` padding), group norm over ``norm_groups`` groups, ReLU."""
    x = jax.lax.conv_general_dilated(
        x, p["w"], (stride, stride), "SAME", dimension_numbers=_DIMS, feature_group_count=groups
    )
    b, h, w, c = x.shape
    g = x.astype(jnp.float32).reshape(b, h, w, norm_groups, c // norm_groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    x = ((g - mean) * jax.lax.rsqrt(var + 1e-5)).reshape(b, h, w, c).astype(x.dtype)
    x = x * p["scale"] + p["bias"]
    return jax.nn.relu(x) if relu else x


def make_stem_block(model: str):
    _, _, (_, stride, pool), _, _, _, _, norm_groups, _ = CONFIGS[model]

    def block(p, batch):
        images, labels = batch
        x = _conv_norm(p["stem"], images.astype(p["stem"]["w"].dtype), norm_groups, stride=stride)
        if pool:
            x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        return x, labels

    return block


def make_unit_block(model: str, name: str, stride: int):
    """One bottleneck unit: 1x1, grouped 3x3 (the stride), 1x1, the shortcut, ReLU."""
    groups, norm_groups = CONFIGS[model][4], CONFIGS[model][7]

    def block(p, carry):
        x, labels = carry
        q = p[name]
        y = _conv_norm(q["conv1"], x, norm_groups)
        y = _conv_norm(q["conv2"], y, norm_groups, stride=stride, groups=groups)
        y = _conv_norm(q["conv3"], y, norm_groups, relu=False)
        if "shortcut" in q:
            x = _conv_norm(q["shortcut"], x, norm_groups, stride=stride, relu=False)
        return jax.nn.relu(x + y), labels

    return block


def _head_logits(hp, x):
    pooled = x.astype(jnp.float32).mean(axis=(1, 2)).astype(x.dtype)
    return pooled @ hp["w"] + hp["b"]


def head_block(p, carry):
    """Global average pooling, the classifier and the cross-entropy loss."""
    x, labels = carry
    return pipelined_training.cross_entropy(_head_logits(p["head"], x), labels)


def _blocks(model: str) -> list:
    blocks = [("stem", make_stem_block(model))]
    blocks += [(n, make_unit_block(model, n, s)) for n, _, _, _, s in _unit_plan(model)]
    return blocks


def logits_fn(model: str):
    """The whole network's logits, for evaluating a trained model."""
    return pipelined_training.chain_logits(
        _blocks(model), lambda params, x: _head_logits(params["head"], x)
    )


def block_model(model: str) -> popdist_emu.BlockModel:
    blocks = [popdist_emu.Block(name, fn, (name,)) for name, fn in _blocks(model)]
    return popdist_emu.BlockModel([*blocks, popdist_emu.Block("head", head_block, ("head",))])


def units_per_ipu(model: str, split_after: str | None, counts: str | None, ipus: int) -> list:
    """Units on each IPU: from ``--units-per-ipu``, from ``--split-after`` (2 IPUs), or
    spread evenly."""
    names = unit_names(model)
    if split_after is not None:
        if counts is not None:
            refuse("give --split-after or --units-per-ipu, not both")
        if ipus != 2:
            refuse(
                f"--split-after splits 2 IPUs, got --ipus-per-replica {ipus}: use --units-per-ipu"
            )
        if split_after not in names[:-1]:
            refuse(
                f"--split-after {split_after!r} is not a unit before the last: give one of "
                f"{names[0]} ... {names[-2]}"
            )
        first = names.index(split_after) + 1
        return [first, len(names) - first]
    return pipelined_training.layers_per_ipu("resnext_training.py", counts, len(names), ipus)


def stages(model: str, counts: list[int]) -> tuple:
    """The stem with IPU 0's units, each IPU's units, the head with the last IPU's."""
    return pipelined_training.stages_per_ipu("stem", unit_names(model), "head", counts)


def parse_args(argv=None) -> argparse.Namespace:
    parser = pipelined_training.image_parser(__doc__, CONFIGS)
    parser.add_argument(
        "--split-after", help="the last unit on IPU 0 of 2 (Graphcore's pipeline_splits)"
    )
    parser.add_argument("--units-per-ipu", help="bottleneck units on each IPU, e.g. 10,23")
    pipelined_training.add_convolution_arguments(parser, learning_rate=0.1)
    return pipelined_training.parse_image_arguments(parser, argv)


def main(argv=None) -> dict:
    start = time.perf_counter()
    args = parse_args(argv)
    ipus = popdist.getNumIpusPerReplica()
    counts = units_per_ipu(args.model, args.split_after, args.units_per_ipu, ipus)
    return pipelined_training.build_and_run(
        args,
        start,
        program="resnext_training.py",
        name=f"ResNeXt-{args.model}",
        stages=stages(args.model, counts),
        placement={"units_per_ipu": counts},
        model=block_model(args.model),
        optimiser=optax.sgd(args.learning_rate, momentum=0.9),
        shapes=functools.partial(_shapes, args.model),
        init=functools.partial(init_params, args.model),
        image=CONFIGS[args.model][:2],
        logits=logits_fn(args.model),
    )


if __name__ == "__main__":
    main()
