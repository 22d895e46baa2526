"""A small training job for the layout test, run by ``poprun-emu`` (not collected by pytest).

A tiny conv net (the layer type whose gradients showed layout-dependent bits under vmap) on
seeded synthetic data, trained a few steps with accumulation and device iterations, then one
step with an Inf planted in one replica's data; instance 0 saves the final parameters and the
error message it got to ``argv[1]``. ``debug=True`` also checks across instances, every step,
that all replicas hold identical parameters.
"""

import sys

import jax
import numpy as np
import optax

import popdist_emu as popdist

BAD_REPLICA = 13


def loss_fn(params, batch):
    images, labels = batch
    x = jax.lax.conv_general_dilated(
        images, params["conv"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    x = jax.nn.relu(x).reshape(x.shape[0], -1)
    logits = x @ params["dense"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def main(path: str) -> None:
    rng = np.random.default_rng(0)
    images = rng.normal(size=(96, 6, 6, 1)).astype(np.float32)
    labels = rng.integers(0, 4, size=96).astype(np.int32)
    # NumPy, not jax.random: every eager JAX op compiles, and 16 instances share 2 CPUs.
    params = {
        "conv": (rng.normal(size=(3, 3, 1, 4)) * 0.3).astype(np.float32),
        "dense": (rng.normal(size=(6 * 6 * 4, 4)) * 0.05).astype(np.float32),
    }
    options = popdist.Options(gradient_accumulation=2, device_iterations=2)
    trainer = popdist.Trainer(loss_fn, optax.adamw(0.01), params, options, timeout=120, debug=True)
    loader = popdist.ReplicaLoader((images, labels), 2, options, seed=4)
    for call in range(2):
        trainer.step(loader.batch(call))
    # Then an Inf in global replica 13's second micro-batch of step 4: every instance must
    # name that replica and step, whichever instance it lives on.
    images, labels = loader.batch(2)
    local = BAD_REPLICA - options.replica_offset
    if 0 <= local < options.replication_factor:
        images = images.copy()
        images[0, 1, local, 0, 0, 0, 0] = np.inf
    try:
        trainer.step((images, labels))
        message = "no error"
    except popdist.NonFiniteGradientError as err:
        message = str(err)
    popdist.execute_on_instances(
        {0},
        np.savez,
        path,
        nan_message=np.array(message),
        **{k: np.asarray(v) for k, v in trainer.params.items()},
    )


if __name__ == "__main__":
    main(sys.argv[1])
