"""The PopTorch pipelining tutorial's network in plain JAX (NHWC), adapted to scikit-learn's
8x8 digits, whole or as the tutorial's four blocks B1..B4 (examples/train.py).

``ConvLayer(1, 10, 5, 2)``, ``ConvLayer(10, 20, 5, 2)``, ``Linear(80, 256)`` + ReLU,
``Linear(256, 10)``, where a ConvLayer is a 5x5 convolution, a 2x2 max-pool and a ReLU. The
tutorial's 28x28 MNIST gives 20*4*4 = 320 features after unpadded convolutions; here the
convolutions use SAME padding, so 8x8 -> pool 4x4 -> pool 2x2 and the flatten has 20*2*2 = 80.

References:
    Graphcore tutorials, "PopTorch: pipelining" (the Network and its blocks).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

import popdist_emu


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    # PyTorch's default Conv2d/Linear initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    bound = 1.0 / math.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def init_tutorial_params(seed: int) -> dict:
    """The network's parameters, named by layer as in the tutorial (``layer1/conv/w``...).

    Drawn with NumPy from ``seed``: the same values on every instance, and no XLA compile
    (an eager ``jax.random`` draw compiles once per leaf shape, seconds on a small machine).
    """
    rng = np.random.default_rng(seed)
    return {
        "layer1": {"conv": {"w": _uniform(rng, (5, 5, 1, 10), 25), "b": _uniform(rng, (10,), 25)}},
        "layer2": {
            "conv": {"w": _uniform(rng, (5, 5, 10, 20), 250), "b": _uniform(rng, (20,), 250)}
        },
        "layer3": {"w": _uniform(rng, (80, 256), 80), "b": _uniform(rng, (256,), 80)},
        "layer4": {"w": _uniform(rng, (256, 10), 256), "b": _uniform(rng, (10,), 256)},
    }


def conv_layer(p: dict, x: jax.Array) -> jax.Array:
    """The tutorial's ConvLayer: 5x5 convolution (SAME), 2x2 max-pool, ReLU."""
    x = jax.lax.conv_general_dilated(
        x, p["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    x = x + p["b"]
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return jax.nn.relu(x)


def tutorial_network(params: dict, images: jax.Array) -> jax.Array:
    """Logits ``[n, 10]`` of images ``[n, 8, 8, 1]``."""
    x = conv_layer(params["layer1"]["conv"], images)
    x = conv_layer(params["layer2"]["conv"], x)
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(x @ params["layer3"]["w"] + params["layer3"]["b"])
    return x @ params["layer4"]["w"] + params["layer4"]["b"]


def tutorial_loss(params: dict, batch: tuple) -> jax.Array:
    """Mean cross-entropy of one micro-batch ``(images, labels)``."""
    images, labels = batch
    logits = tutorial_network(params, images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def _block1(p: dict, batch: tuple) -> tuple:
    images, labels = batch
    return conv_layer(p["layer1"]["conv"], images), labels


def _block2(p: dict, x: tuple) -> tuple:
    return conv_layer(p["layer2"]["conv"], x[0]), x[1]


def _block3(p: dict, x: tuple) -> tuple:
    h = x[0].reshape(x[0].shape[0], -1)
    return jax.nn.relu(h @ p["layer3"]["w"] + p["layer3"]["b"]), x[1]


def _block4(p: dict, x: tuple) -> jax.Array:
    logits = x[0] @ p["layer4"]["w"] + p["layer4"]["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, x[1]).mean()


# The tutorial's four blocks B1..B4 (its poptorch.BeginBlock annotations): the labels travel
# with the activations to the block that computes the loss.
TUTORIAL_BLOCK_MODEL = popdist_emu.BlockModel(
    [
        popdist_emu.Block("B1", _block1, ("layer1",)),
        popdist_emu.Block("B2", _block2, ("layer2",)),
        popdist_emu.Block("B3", _block3, ("layer3",)),
        popdist_emu.Block("B4", _block4, ("layer4",)),
    ]
)
# Stages per IPUs per replica: the tutorial's one block per IPU on 4 IPUs, two on 2.
TUTORIAL_STAGES = {
    2: (popdist_emu.Stage("B1", "B2"), popdist_emu.Stage("B3", "B4")),
    4: tuple(popdist_emu.Stage(f"B{i}") for i in range(1, 5)),
}
