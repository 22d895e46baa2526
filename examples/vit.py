"""Vision Transformer (ViT) pre-training in plain JAX, pipelined over the IPUs of a replica.

Graphcore's PopTorch ViT (graphcore/examples, ``vision/vit/pytorch``, configuration
``b16_in1k_pretrain_lamb``) pre-trains ViT-B/16 on ImageNet-1k with LAMB over 4 IPUs per
replica, three encoder layers on each. Run its IPU-POD64 benchmark configuration offline
(compile only, from shapes; ``benchmarks.yml``'s ``pytorch_vit_lamb_pretrain_gen_pod64``,
which passes ``--enable-rts false``)::

    poprun-emu --offline-mode yes --system bow-pod64 --num-replicas 16 --num-instances 8 \\
        --ipus-per-replica 4 examples/vit.py --model base --micro-batch-size 8 \\
        --gradient-accumulation 512 --layers-per-ipu 3,3,3,3 \\
        --available-memory-proportion 0.3 --recompute

or train the tiny model for real on the handwritten digits shipped with scikit-learn (8x8
images cut into 2x2 patches)::

    poprun-emu --num-replicas 2 --ipus-per-replica 2 examples/vit.py --model tiny

The model is ViT (Dosovitskiy et al. 2021): the image cut into patches, each projected
linearly (the stride-``patch`` convolution as a matmul), a class token and learned position
embeddings; pre-norm encoder layers (layer norm, multi-head self-attention, residual; layer
norm, GELU MLP, residual); a final layer norm on the class token, the pre-logits layer
(``representation_size``: dense and tanh, as in pre-training) and the classifier, with a
cross-entropy loss. Blocks: ``embeddings``, ``layer00`` ... and ``head``; the embeddings go on
IPU 0 with its layers and the head with the last IPU's, as Graphcore's ViT places them.
Dropout and mixup change no cost the model counts and are left out.

The last line printed (by instance 0) is a JSON object with the simulated throughput.

References:
    Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for Image Recognition at
    Scale", ICLR 2021 (ViT-B/16: 12 layers, hidden 768, 12 heads, MLP 3072, patch 16);
    graphcore/examples ``vision/vit/pytorch/configs.yml`` and ``benchmarks.yml`` (the
    configuration); You et al., "Large Batch Optimization for Deep Learning" (LAMB).
"""

from __future__ import annotations

import argparse
import functools
import math
import time

import jax
import jax.numpy as jnp
import pipelined_training
import popdist
from pipelined_training import attention, dense

import popdist_emu

# (image, patch, channels, layers, hidden, heads, mlp, classes, representation)
CONFIGS = {
    "tiny": (8, 2, 1, 2, 32, 2, 64, 10, 32),
    "base": (224, 16, 3, 12, 768, 12, 3072, 1000, 768),
}


def _shapes(model: str, dtype) -> dict:
    image, patch, channels, layers, h, _, mlp, classes, rep = CONFIGS[model]
    tokens = (image // patch) ** 2 + 1

    def ln():
        return {"scale": (h,), "bias": (h,)}

    shapes = {
        "embeddings": {
            "patch": {"w": (patch * patch * channels, h), "b": (h,)},
            "cls": (h,),
            "position": (tokens, h),
        },
        "head": {
            "ln": ln(),
            "pre_logits": {"w": (h, rep), "b": (rep,)},
            "classifier": {"w": (rep, classes), "b": (classes,)},
        },
    }
    for i in range(layers):
        shapes[f"layer{i:02d}"] = {
            "ln1": ln(),
            "qkv": {"w": (h, 3 * h), "b": (3 * h,)},
            "out": {"w": (h, h), "b": (h,)},
            "ln2": ln(),
            "mlp1": {"w": (h, mlp), "b": (mlp,)},
            "mlp2": {"w": (mlp, h), "b": (h,)},
        }
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s, dtype), shapes, is_leaf=lambda x: isinstance(x, tuple)
    )


def init_params(model: str, dtype, key: jax.Array) -> dict:
    """LeCun-normal dense weights (std 1/sqrt(fan-in), as the ViT reference's initialisers
    scale them), 0.02 truncated-normal class token and position embeddings, zero biases and
    unit layer-norm scales."""

    def std(name: str, shape: tuple) -> float:
        return 1.0 / math.sqrt(shape[0]) if name.endswith("['w']") else 0.02

    return pipelined_training.init_from_shapes(_shapes(model, dtype), key, std)


_layer_norm = functools.partial(pipelined_training.layer_norm, eps=1e-6)
layers_per_ipu = functools.partial(pipelined_training.layers_per_ipu, "vit.py")


def make_embeddings_block(model: str):
    """Patches projected linearly, the class token prepended, position embeddings added."""
    patch = CONFIGS[model][1]

    def block(p, batch):
        images, labels = batch
        e = p["embeddings"]
        b, height, width, c = images.shape
        x = images.astype(e["cls"].dtype).reshape(
            b, height // patch, patch, width // patch, patch, c
        )
        x = x.transpose(0, 1, 3, 2, 4, 5).reshape(b, -1, patch * patch * c)
        x = dense(e["patch"], x)
        cls = jnp.broadcast_to(e["cls"], (b, 1, x.shape[-1]))
        return jnp.concatenate([cls, x], axis=1) + e["position"][None], labels

    return block


def make_layer_block(name: str, heads: int):
    """One pre-norm encoder layer: attention and MLP, each behind a layer norm and residual."""

    def block(p, carry):
        x, labels = carry
        q = p[name]
        x = x + attention(q, _layer_norm(q["ln1"], x), heads)
        mlp = dense(q["mlp2"], jax.nn.gelu(dense(q["mlp1"], _layer_norm(q["ln2"], x))))
        return x + mlp, labels

    return block


def _head_logits(hp, x):
    """Final layer norm on the class token, pre-logits (dense, tanh), classifier."""
    cls = _layer_norm(hp["ln"], x[:, 0])
    return dense(hp["classifier"], jnp.tanh(dense(hp["pre_logits"], cls)))


def head_block(p, carry):
    """The head's logits and the cross-entropy loss."""
    x, labels = carry
    return pipelined_training.cross_entropy(_head_logits(p["head"], x), labels)


def logits_fn(model: str):
    """The whole network's logits, for evaluating a trained model."""
    layers, heads = CONFIGS[model][3], CONFIGS[model][5]
    embed = make_embeddings_block(model)
    blocks = [make_layer_block(f"layer{i:02d}", heads) for i in range(layers)]

    def logits(params, images):
        x, _ = embed(params, (images, jnp.zeros(images.shape[0], jnp.int32)))
        for block in blocks:
            x, _ = block(params, (x, None))
        return _head_logits(params["head"], x)

    return jax.jit(logits)


def block_model(model: str) -> popdist_emu.BlockModel:
    layers, heads = CONFIGS[model][3], CONFIGS[model][5]
    blocks = [popdist_emu.Block("embeddings", make_embeddings_block(model), ("embeddings",))]
    for i in range(layers):
        name = f"layer{i:02d}"
        blocks.append(popdist_emu.Block(name, make_layer_block(name, heads), (name,)))
    blocks.append(popdist_emu.Block("head", head_block, ("head",)))
    return popdist_emu.BlockModel(blocks)


def stages(model: str, counts: list[int]) -> tuple:
    """The embeddings with IPU 0's layers, each IPU's layers, the head with the last IPU's."""
    names = [f"layer{k:02d}" for k in range(CONFIGS[model][3])]
    return pipelined_training.stages_per_ipu("embeddings", names, "head", counts)


def parse_args(argv=None) -> argparse.Namespace:
    parser = pipelined_training.image_parser(__doc__, CONFIGS)
    parser.add_argument("--layers-per-ipu", help="encoder layers on each IPU, e.g. 3,3,3,3")
    pipelined_training.add_training_arguments(
        parser,
        steps=150,
        learning_rate=3e-3,
        proportion_help="Graphcore's ViT sets matmul_proportion 0.3 on each",
    )
    return pipelined_training.parse_image_arguments(parser, argv)


def main(argv=None) -> dict:
    start = time.perf_counter()
    args = parse_args(argv)
    ipus = popdist.getNumIpusPerReplica()
    counts = layers_per_ipu(args.layers_per_ipu, CONFIGS[args.model][3], ipus)
    return pipelined_training.build_and_run(
        args,
        start,
        program="vit.py",
        name=f"ViT-{args.model}",
        stages=stages(args.model, counts),
        placement={"layers_per_ipu": counts},
        model=block_model(args.model),
        optimiser=pipelined_training.lamb_in_float32(args.learning_rate),
        shapes=functools.partial(_shapes, args.model),
        init=functools.partial(init_params, args.model),
        image=(CONFIGS[args.model][0], CONFIGS[args.model][2]),
        logits=logits_fn(args.model),
    )


if __name__ == "__main__":
    main()
