"""EfficientNet training in plain JAX, pipelined over the IPUs of a replica.

Graphcore's TensorFlow CNNs train EfficientNet-B4 with group convolutions of 16 channels in
place of the depthwise ones and an expansion ratio of 4 ("G16-EfficientNet", Masters et al.
2021) over 2 IPUs per replica. Their POD16 benchmark configuration (``configs.yml`` key
``mk2_efficientnet_b4_g16_16ipus``: 8 replicas, micro-batch 3, gradient accumulation 256, the
pipeline split at ``block4a``, recomputation, half partials, group norm of 4 groups,
``available_memory_proportion`` 0.4, 16.16 precision, LARS) runs offline (compile only, from
shapes) as::

    poprun-emu --offline-mode yes --system bow-pod16 --num-replicas 8 --num-instances 8 \\
        --ipus-per-replica 2 examples/efficientnet_training.py --model b4 --group-dim 16 \\
        --expand-ratio 4 --micro-batch-size 3 --gradient-accumulation 256 \\
        --pipeline-splits block4a --recompute --enable-half-partials \\
        --available-memory-proportion 0.4 --optimiser lars

or the tiny model trains for real on the handwritten digits shipped with scikit-learn::

    poprun-emu --num-replicas 2 --ipus-per-replica 2 examples/efficientnet_training.py

The model (Tan and Le 2019, as Graphcore's ``Models/efficientnet.py`` builds it): a 3x3
stride-2 stem (the tiny model: stride 1), then mobile inverted bottlenecks (MBConv: a 1x1
expansion, a kxk convolution in groups of ``--group-dim`` channels carrying the stride (1:
depthwise), squeeze-and-excitation of a quarter of the block's input channels, a 1x1
projection; each convolution followed by a group norm, all but the projection by swish; the
residual where the shape is kept), then a 1x1 convolution to the top width, global average
pooling and the classifier, trained on the cross-entropy. Widths and depths scale by the
model's coefficients (B4: 1.4 and 1.8, at 380 x 380; the tiny model keeps the first four
stages at a quarter of the width, on 8 x 8 digits). Stochastic depth and the dropout before
the classifier are left out: they change the numbers, not the step's shape. Blocks: ``stem``,
one per MBConv (``block1a`` ...) and ``top``; ``--pipeline-splits`` names the block each later
IPU starts with (Graphcore's ``pipeline_splits``), or ``--blocks-per-ipu`` spreads them.

The last line printed (by instance 0) is a JSON object with the simulated throughput.

References:
    Tan and Le, "EfficientNet: Rethinking Model Scaling for Convolutional Neural Networks",
    ICML 2019 (the baseline's stages, the compound coefficients and B4's 380 pixels); Masters
    et al., "Making EfficientNet More Efficient: Exploring Batch-Independent Normalization,
    Group Convolutions and Reduced Resolution Training", 2021 (group dimension 16, expansion
    4, group norm); mlcommons/training_results_v2.0,
    ``Graphcore/benchmarks/resnet/implementations/tensorflow``: ``configs.yml``,
    ``benchmarks.yml`` and ``Models/efficientnet.py`` (filters rounded to multiples of 8,
    repeats rounded up, a top width of 1280 before scaling, norm epsilon 1e-3).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import string
import time
from typing import NoReturn

import jax
import jax.numpy as jnp
import optax
import pipelined_training
import popdist

import popdist_emu
from popdist_emu import arguments

# The baseline's stages (Tan and Le 2019, Table 1): kernel, repeats, input and output
# filters, expansion (None: --expand-ratio), stride.
STAGES = (
    (3, 1, 32, 16, 1, 1),
    (3, 2, 16, 24, None, 2),
    (5, 2, 24, 40, None, 2),
    (3, 3, 40, 80, None, 2),
    (5, 3, 80, 112, None, 1),
    (5, 4, 112, 192, None, 2),
    (3, 1, 192, 320, None, 1),
)
# (image, channels, width and depth coefficients, stem stride, classes, stages of STAGES)
CONFIGS = {
    "tiny": (8, 1, 0.25, 0.3, 1, 10, 4),
    "b0": (224, 3, 1.0, 1.0, 2, 1000, 7),
    "b4": (380, 3, 1.4, 1.8, 2, 1000, 7),
}
TOP_WIDTH, DEPTH_DIVISOR, NORM_GROUPS, SE_RATIO, NORM_EPS = 1280, 8, 4, 0.25, 1e-3
_DIMS = ("NHWC", "HWIO", "NHWC")


def refuse(message: str) -> NoReturn:
    pipelined_training.refuse("efficientnet_training.py", message)


def round_filters(filters: int, width: float) -> int:
    """Filters scaled by ``width``, rounded to a multiple of 8 and never 10 % below."""
    scaled = filters * width
    rounded = max(DEPTH_DIVISOR, int(scaled + DEPTH_DIVISOR / 2) // DEPTH_DIVISOR * DEPTH_DIVISOR)
    return rounded + DEPTH_DIVISOR if rounded < 0.9 * scaled else rounded


def block_plan(model: str, expand_ratio: int) -> list[tuple]:
    """Per MBConv: name, input and output filters, kernel, stride, expansion."""
    _, _, width, depth, stem_stride, _, num_stages = CONFIGS[model]
    plan = []
    for s, (kernel, repeats, cin, cout, expand, stride) in enumerate(STAGES[:num_stages]):
        cin, cout = round_filters(cin, width), round_filters(cout, width)
        if stem_stride == 1 and s == 1:
            stride = 1  # a small image keeps its second stage's size, as Graphcore's CIFAR
        for b in range(math.ceil(depth * repeats)):
            name = f"block{s + 1}{string.ascii_lowercase[b]}"
            plan.append((name, cin, cout, kernel, stride if b == 0 else 1, expand or expand_ratio))
            cin = cout
    return plan


def block_names(model: str) -> list[str]:
    return [name for name, *_ in block_plan(model, 1)]


def _conv(kernel: int, cin: int, cout: int, groups: int = 1, bias: bool = False) -> dict:
    out = {"w": (kernel, kernel, cin // groups, cout)}
    return out | ({"b": (cout,)} if bias else {"scale": (cout,), "bias": (cout,)})


def _groups(channels: int, group_dim: int) -> int:
    """Graphcore's ``conv2d_basic``: channels // group_dim groups, at least one."""
    return max(channels // group_dim, 1)


def _shapes(model: str, dtype, group_dim: int, expand_ratio: int) -> dict:
    _, channels, width, _, _, classes, _ = CONFIGS[model]
    shapes = {"stem": _conv(3, channels, round_filters(32, width))}
    for name, cin, cout, kernel, _, expand in block_plan(model, expand_ratio):
        mid, reduced = cin * expand, max(1, int(cin * SE_RATIO))
        block = {"expand": _conv(1, cin, mid)} if expand != 1 else {}
        block |= {
            "conv": _conv(kernel, mid, mid, _groups(mid, group_dim)),
            "se_reduce": _conv(1, mid, reduced, bias=True),
            "se_expand": _conv(1, reduced, mid, bias=True),
            "project": _conv(1, mid, cout),
        }
        shapes[name] = block
    top, last = round_filters(TOP_WIDTH, width), block_plan(model, expand_ratio)[-1][2]
    shapes["top"] = {"conv": _conv(1, last, top), "w": (top, classes), "b": (classes,)}
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s, dtype), shapes, is_leaf=lambda x: isinstance(x, tuple)
    )


def init_params(model: str, group_dim: int, expand_ratio: int, dtype, key: jax.Array) -> dict:
    """He-normal convolutions (std sqrt(2 / fan-in)), unit norm scales, zero shifts and
    biases, a zero-initialised classifier."""

    def std(name: str, shape: tuple) -> float:
        return math.sqrt(2.0 / math.prod(shape[:3])) if len(shape) == 4 else 0.0

    shapes = _shapes(model, dtype, group_dim, expand_ratio)
    return pipelined_training.init_from_shapes(shapes, key, std)


def _conv_norm(p, x, *, stride: int = 1, groups: int = 1, swish: bool = True):
    """Convolution (``SAME`` padding), group norm of ``NORM_GROUPS`` groups, swish."""
    x = jax.lax.conv_general_dilated(
        x, p["w"], (stride, stride), "SAME", dimension_numbers=_DIMS, feature_group_count=groups
    )
    b, h, w, c = x.shape
    g = x.astype(jnp.float32).reshape(b, h, w, NORM_GROUPS, c // NORM_GROUPS)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    x = ((g - mean) * jax.lax.rsqrt(var + NORM_EPS)).reshape(b, h, w, c).astype(x.dtype)
    x = x * p["scale"] + p["bias"]
    return jax.nn.swish(x) if swish else x


def _squeeze_excite(p, x):
    """The channels rescaled by a sigmoid of two 1x1 convolutions of their mean."""
    s = x.astype(jnp.float32).mean(axis=(1, 2), keepdims=True).astype(x.dtype)
    for name, act in (("se_reduce", jax.nn.swish), ("se_expand", jax.nn.sigmoid)):
        q = p[name]
        s = act(
            jax.lax.conv_general_dilated(s, q["w"], (1, 1), "VALID", dimension_numbers=_DIMS)
            + q["b"]
        )
    return x * s


def make_stem_block(model: str):
    stride = CONFIGS[model][4]

    def block(p, batch):
        images, labels = batch
        return _conv_norm(p["stem"], images.astype(p["stem"]["w"].dtype), stride=stride), labels

    return block


def make_mbconv_block(name: str, cin: int, cout: int, stride: int, group_dim: int):
    """One MBConv: expansion, grouped convolution (the stride), squeeze-and-excitation,
    projection, and the residual where the shape is kept."""

    def block(p, carry):
        x, labels = carry
        q = p[name]
        y = _conv_norm(q["expand"], x) if "expand" in q else x
        mid = y.shape[-1]
        y = _conv_norm(q["conv"], y, stride=stride, groups=_groups(mid, group_dim))
        y = _conv_norm(q["project"], _squeeze_excite(q, y), swish=False)
        return (x + y if stride == 1 and cin == cout else y), labels

    return block


def _top_logits(tp, x):
    x = _conv_norm(tp["conv"], x)
    pooled = x.astype(jnp.float32).mean(axis=(1, 2)).astype(x.dtype)
    return pooled @ tp["w"] + tp["b"]


def top_block(p, carry):
    """The 1x1 convolution to the top width, pooling, the classifier and the cross-entropy."""
    x, labels = carry
    return pipelined_training.cross_entropy(_top_logits(p["top"], x), labels)


def _blocks(model: str, group_dim: int, expand_ratio: int) -> list:
    blocks = [("stem", make_stem_block(model))]
    for name, cin, cout, _, stride, _ in block_plan(model, expand_ratio):
        blocks.append((name, make_mbconv_block(name, cin, cout, stride, group_dim)))
    return blocks


def logits_fn(model: str, group_dim: int, expand_ratio: int):
    """The whole network's logits, for evaluating a trained model."""
    return pipelined_training.chain_logits(
        _blocks(model, group_dim, expand_ratio), lambda params, x: _top_logits(params["top"], x)
    )


def block_model(model: str, group_dim: int, expand_ratio: int) -> popdist_emu.BlockModel:
    blocks = [popdist_emu.Block(n, fn, (n,)) for n, fn in _blocks(model, group_dim, expand_ratio)]
    return popdist_emu.BlockModel([*blocks, popdist_emu.Block("top", top_block, ("top",))])


def blocks_per_ipu(model: str, splits: list[str] | None, counts: str | None, ipus: int) -> list:
    """MBConv blocks on each IPU: from ``--pipeline-splits`` (the block each later IPU starts
    with, in order), from ``--blocks-per-ipu``, or spread evenly."""
    names = block_names(model)
    if splits is None:
        return pipelined_training.layers_per_ipu(
            "efficientnet_training.py", counts, len(names), ipus
        )
    if counts is not None:
        refuse("give --pipeline-splits or --blocks-per-ipu, not both")
    if len(splits) != ipus - 1:
        refuse(
            f"--pipeline-splits {' '.join(splits)} gives {len(splits) + 1} stages for "
            f"--ipus-per-replica {ipus}: name {ipus - 1} blocks"
        )
    starts = []
    for split in splits:
        if split not in names[1:]:
            refuse(
                f"--pipeline-splits {split!r} is not a block after the first: give one of "
                f"{names[1]} ... {names[-1]}"
            )
        starts.append(names.index(split))
    if starts != sorted(set(starts)):
        refuse(f"--pipeline-splits {' '.join(splits)} must name blocks in order, once each")
    edges = [0, *starts, len(names)]
    return [b - a for a, b in itertools.pairwise(edges)]


def stages(model: str, counts: list[int]) -> tuple:
    """The stem with IPU 0's blocks, each IPU's blocks, the top with the last IPU's."""
    return pipelined_training.stages_per_ipu("stem", block_names(model), "top", counts)


OPTIMISERS = {
    "momentum": lambda lr: optax.sgd(lr, momentum=0.9),
    # Graphcore's large-batch configuration: LARS, momentum 0.885, weight decay 2.5e-6.
    "lars": lambda lr: popdist_emu.lars(lr, weight_decay=2.5e-6, momentum=0.885),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = pipelined_training.image_parser(__doc__, CONFIGS)
    parser.add_argument(
        "--group-dim",
        type=arguments.positive_int,
        default=1,
        help="channels per group of the kxk convolutions (1: depthwise; Graphcore's G16: 16)",
    )
    parser.add_argument("--expand-ratio", type=arguments.positive_int, default=6)
    parser.add_argument(
        "--pipeline-splits", nargs="+", help="the block each later IPU starts with, e.g. block4a"
    )
    parser.add_argument("--blocks-per-ipu", help="MBConv blocks on each IPU, e.g. 10,22")
    parser.add_argument("--optimiser", choices=tuple(OPTIMISERS), default="momentum")
    pipelined_training.add_convolution_arguments(parser, learning_rate=0.01)
    return pipelined_training.parse_image_arguments(parser, argv)


def main(argv=None) -> dict:
    start = time.perf_counter()
    args = parse_args(argv)
    ipus = popdist.getNumIpusPerReplica()
    counts = blocks_per_ipu(args.model, args.pipeline_splits, args.blocks_per_ipu, ipus)
    net = (args.model, args.group_dim, args.expand_ratio)
    return pipelined_training.build_and_run(
        args,
        start,
        program="efficientnet_training.py",
        name=f"EfficientNet-{args.model}",
        stages=stages(args.model, counts),
        placement={"blocks_per_ipu": counts},
        model=block_model(*net),
        optimiser=OPTIMISERS[args.optimiser](args.learning_rate),
        shapes=lambda dtype: _shapes(args.model, dtype, args.group_dim, args.expand_ratio),
        init=functools.partial(init_params, *net),
        image=CONFIGS[args.model][:2],
        logits=logits_fn(*net),
    )


if __name__ == "__main__":
    main()
