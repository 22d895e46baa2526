"""The Trainer: equivalence of replicas / accumulation / micro-batch, compile-once, offline
mode, and clear errors for bad input."""

import os
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gcl
import popdist_emu as popdist
from popdist_emu import NonFiniteGradientError, NonScalarLossError, Options, ReplicaLoader, Trainer

IN, OUT = 4, 3
# Shared by the property test's trainers, so they share compiled code.
ADAM = optax.adam(0.05)


def init_params():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {"w": jax.random.normal(k1, (IN, OUT)), "b": jax.random.normal(k2, (OUT,))}


def loss_fn(params, batch):
    x, y = batch
    pred = jnp.tanh(x @ params["w"] + params["b"])
    return jnp.mean((pred - y) ** 2)


def data(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, IN)).astype(np.float32)
    y = rng.normal(size=(n, OUT)).astype(np.float32)
    return x, y


def train(options, micro, steps, optimiser=None, seed=1):
    trainer = Trainer(loss_fn, optimiser or ADAM, init_params(), options)
    loader = ReplicaLoader(data(), micro, options, seed=seed)
    losses = [trainer.step(loader.batch(call)) for call in range(steps)]
    return trainer.params, losses


@settings(max_examples=10)
@given(
    replicas=st.sampled_from([2, 4, 8]),
    micro=st.integers(1, 3),
    reduction=st.sampled_from(["mean", "sum"]),
)
def test_replicas_equal_accumulation_equal_bigger_micro_batch(replicas, micro, reduction):
    # N replicas x micro-batch b == 1 replica x GA N (same samples, same sum over them).
    # With the mean reduction both also equal 1 replica x micro-batch N*b.
    runs = [
        train(Options(replication_factor=replicas, reduction=reduction), micro, 3),
        train(
            Options(replication_factor=1, gradient_accumulation=replicas, reduction=reduction),
            micro,
            3,
        ),
    ]
    if reduction == "mean":
        runs.append(train(Options(replication_factor=1), micro * replicas, 3))
    (ref_params, ref_losses), *others = runs
    for params, losses in others:
        np.testing.assert_allclose(losses, ref_losses, rtol=2e-5)
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params), strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_loss_is_global_mean_over_replicas_and_accumulation():
    opts = Options(replication_factor=2, gradient_accumulation=3)
    trainer = Trainer(loss_fn, optax.sgd(0.0), init_params(), opts)
    batch = ReplicaLoader(data(), 2, opts).batch(0)
    expected = np.mean(
        [
            loss_fn(init_params(), (batch[0][0, a, k], batch[1][0, a, k]))
            for a in range(3)
            for k in range(2)
        ]
    )
    np.testing.assert_allclose(trainer.step(batch), expected, rtol=1e-6)


def test_sum_reduction_scales_the_gradient():
    mean = train(Options(replication_factor=4, reduction="mean"), 2, 1, optax.sgd(0.4))[0]
    total = train(Options(replication_factor=4, reduction="sum"), 2, 1, optax.sgd(0.1))[0]
    for a, b in zip(jax.tree.leaves(mean), jax.tree.leaves(total), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_compiled_once_not_per_step():
    traces = []

    def counting_loss(params, batch):
        traces.append(1)  # runs only while JAX traces
        return loss_fn(params, batch)

    opts = Options(
        replication_factor=2, gradient_accumulation=2, device_iterations=2, output_mode="all"
    )
    trainer = Trainer(counting_loss, optax.adam(0.01), init_params(), opts)
    loader = ReplicaLoader(data(), 2, opts)
    assert trainer.step(loader.batch(0)).shape == (2,)
    after_first = len(traces)
    for call in range(1, 5):
        trainer.step(loader.batch(call))
    assert len(traces) == after_first
    assert trainer.steps_done == 10


def test_user_params_are_not_consumed():
    params = init_params()
    opts = Options(replication_factor=1)
    trainer = Trainer(loss_fn, optax.sgd(0.1), params, opts)
    trainer.step(ReplicaLoader(data(), 2, opts).batch(0))
    np.testing.assert_array_equal(params["w"], init_params()["w"])  # still readable, unchanged


def test_batch_with_wrong_leading_dims_fails_clearly():
    opts = Options(replication_factor=2, gradient_accumulation=2)
    trainer = Trainer(loss_fn, optax.sgd(0.1), init_params(), opts)
    x, y = ReplicaLoader(data(), 2, opts).batch(0)
    with pytest.raises(
        ValueError,
        match=r"leading dims must be \[device_iterations=1, gradient_accumulation=2, "
        r"replication_factor=2",
    ):
        trainer.step((x[:, :, :1], y[:, :, :1]))


def test_leaves_may_differ_in_micro_batch_size_as_poptorch_splits_each_input():
    """A per-micro-batch weight beside the samples (ViT's mixup coefficient): the step is
    the weighted loss, as a trainer given the weight as a constant computes it."""
    opts = Options(replication_factor=2, gradient_accumulation=2)
    x, y = ReplicaLoader(data(), 2, opts).batch(0)
    scale = np.arange(1.0, 5.0, dtype=np.float32).reshape(1, 2, 2, 1)

    def scaled(params, batch):
        x, y, s = batch
        return loss_fn(params, (x, y)) * s[0]

    got = Trainer(scaled, optax.sgd(0.1), init_params(), opts).step((x, y, scale))
    want = np.mean(
        [
            loss_fn(init_params(), (x[0, a, k], y[0, a, k])) * scale[0, a, k, 0]
            for a in range(2)
            for k in range(2)
        ]
    )
    np.testing.assert_allclose(float(got), want, rtol=1e-5)


def test_non_scalar_loss_fails_clearly():
    opts = Options(replication_factor=1)
    trainer = Trainer(lambda p, b: (b[0] @ p["w"]).sum(0), optax.sgd(0.1), init_params(), opts)
    with pytest.raises(
        NonScalarLossError, match=r"must return a real scalar \(shape \(\)\), got .*\(3,\)"
    ):
        trainer.step(ReplicaLoader(data(), 2, opts).batch(0))


def test_nan_gradient_names_replica_and_step():
    opts = Options(replication_factor=4, gradient_accumulation=2)
    trainer = Trainer(loss_fn, optax.sgd(0.1), init_params(), opts)
    loader = ReplicaLoader(data(), 2, opts)
    trainer.step(loader.batch(0))
    x, y = loader.batch(1)
    x = x.copy()
    x[0, 1, 2, 0, 0] = np.nan  # step 1, micro-batch 1, replica 2
    before = jax.tree.map(np.array, trainer.params)
    with pytest.raises(
        NonFiniteGradientError, match=r"global replica 2 at step 1 \(micro-batch 1 of"
    ):
        trainer.step((x, y))
    for a, b in zip(jax.tree.leaves(trainer.params), jax.tree.leaves(before), strict=True):
        np.testing.assert_array_equal(a, b)  # the bad step was not applied


def test_replicas_identical_check_passes():
    opts = Options(replication_factor=2)
    trainer = Trainer(loss_fn, optax.adam(0.1), init_params(), opts, debug=True)
    trainer.step(ReplicaLoader(data(), 2, opts).batch(0))
    trainer.check_replicas_identical()


def test_offline_mode_compiles_from_shapes_without_collectives():
    def no_collectives(*args, **kwargs):
        raise AssertionError("offline mode called a collective")

    shapes = jax.eval_shape(init_params)
    batch = (
        jax.ShapeDtypeStruct((1, 2, 4, 8, IN), jnp.float32),
        jax.ShapeDtypeStruct((1, 2, 4, 8, OUT), jnp.float32),
    )
    with (
        mock.patch.dict(os.environ, {"POPDIST_EMU_OFFLINE": "1"}),
        mock.patch.object(gcl, "all_reduce", no_collectives),
    ):
        assert popdist.is_offline_mode()
        # The launcher's --offline-mode is read once, with the layout, into the options.
        opts = Options(replication_factor=4, gradient_accumulation=2)
        assert opts.offline
        trainer = Trainer(loss_fn, optax.adam(0.01), shapes, opts)
        compiled = trainer.compile(batch)
        with pytest.raises(RuntimeError, match="offline mode"):
            trainer.step(batch)
    assert compiled.micro_step.compiled.cost_analysis() is not None
    (record,) = compiled.collectives
    assert (record.kind, record.group) == ("all_reduce", "all")
    assert record.bytes == 4 * (IN * OUT + OUT) + 4  # gradients + the loss sum
    args = trainer.example_args(batch)
    assert args["micro_step"][2][0].shape == (8, IN)
    profile = trainer.profile(batch)
    assert (profile.micro_batch_size, profile.gradient_accumulation) == (8, 2)
    assert profile.gradient_bytes == 4 * (IN * OUT + OUT)
    assert profile.collectives == compiled.collectives
    assert trainer.compile(batch) is compiled  # compiled once, then held


def aux_loss_fn(params, batch):
    """``loss_fn`` with the predictions as outputs (``has_aux``)."""
    x, y = batch
    pred = jnp.tanh(x @ params["w"] + params["b"])
    return jnp.mean((pred - y) ** 2), {"pred": pred}


@pytest.mark.parametrize("accumulation", [1, 4])  # 4: micro-batches computed together
def test_has_aux_returns_each_micro_batchs_outputs_from_its_iterations_weights(accumulation):
    opts = Options(
        replication_factor=2,
        gradient_accumulation=accumulation,
        device_iterations=3,
        output_mode="all",
    )
    batch = ReplicaLoader(data(), 2, opts).batch(0)
    plain = Trainer(loss_fn, optax.sgd(0.3), init_params(), opts)
    weights = []
    losses = plain.step(batch, each_iteration=lambda d, p: weights.append(jax.device_get(p)))
    with_aux = Trainer(aux_loss_fn, optax.sgd(0.3), init_params(), opts, has_aux=True)
    aux_losses, outputs = with_aux.step(batch)
    assert np.array_equal(aux_losses, losses)  # the same step, bit for bit
    for name in ("w", "b"):
        assert np.array_equal(with_aux.params[name], plain.params[name])
    x = batch[0]
    assert outputs["pred"].shape == (*x.shape[:4], OUT)
    for d, a, k in np.ndindex(*x.shape[:3]):
        want = np.tanh(x[d, a, k] @ weights[d]["w"] + weights[d]["b"])
        np.testing.assert_allclose(outputs["pred"][d, a, k], want, rtol=1e-5, atol=1e-6)


def test_has_aux_is_refused_with_a_pipeline():
    def first(p, b):
        return jnp.tanh(b[0] @ p["w"]), b[1]

    def last(p, b):
        return jnp.mean((b[0] + p["b"] - b[1]) ** 2), {}

    blocks = popdist.BlockModel(
        [popdist.Block("B0", first, ("w",)), popdist.Block("B1", last, ("b",))]
    )
    with mock.patch.dict(os.environ, {"POPDIST_NUM_IPUS_PER_REPLICA": "2"}):
        strategy = popdist.PipelinedExecution(popdist.Stage("B0"), popdist.Stage("B1"))
        options = Options(gradient_accumulation=3, execution_strategy=strategy)
        with pytest.raises(ValueError, match=r"has_aux=True .* pipeline"):
            Trainer(blocks, optax.sgd(0.1), init_params(), options, has_aux=True)
        Trainer(blocks, optax.sgd(0.1), init_params(), options)  # the same, without outputs
