"""profile_step on a tiny MLP: XLA's counts, sizes and the memory they imply."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import hardware
from popdist_emu.programs import StepSettings, profile_step

IN, HIDDEN, OUT = 16, 32, 4
OPTIMISER = optax.sgd(0.1, momentum=0.9)


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


grad_fn = jax.jit(jax.grad(loss_fn))


@jax.jit
def update_fn(params, opt_state, grads):
    updates, opt_state = OPTIMISER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def shapes(batch):
    params = {
        "w1": jax.ShapeDtypeStruct((IN, HIDDEN), jnp.float32),
        "b1": jax.ShapeDtypeStruct((HIDDEN,), jnp.float32),
        "w2": jax.ShapeDtypeStruct((HIDDEN, OUT), jnp.float32),
    }
    x = jax.ShapeDtypeStruct((batch, IN), jnp.float32)
    y = jax.ShapeDtypeStruct((batch,), jnp.int32)
    return params, jax.eval_shape(OPTIMISER.init, params), x, y


def profile(batch, *, loss=None, settings=None, **kwargs):
    """``profile_step`` of the MLP at micro-batch ``batch``, ``settings`` (a dict) its
    StepSettings' fields but the micro-batch."""
    params, opt_state, x, y = shapes(batch)
    step = StepSettings(micro_batch_size=batch, **(settings or {}))
    return profile_step(
        grad_fn,
        update_fn,
        params=params,
        opt_state=opt_state,
        batch=(x, y),
        loss_fn=loss,
        settings=step,
        **kwargs,
    )


def test_profile_reads_xla_cost_and_the_tree_sizes():
    p = profile(8, loss=loss_fn, settings={"gradient_accumulation": 3})
    params, _, x, y = shapes(8)
    expected = grad_fn.lower(params, x, y).compile().cost_analysis()
    expected = expected[0] if isinstance(expected, list) else expected
    assert p.grad_flops == expected["flops"] > 2 * 8 * IN * HIDDEN
    assert p.grad_bytes_accessed == expected["bytes accessed"]
    assert p.grad_transcendentals == expected["transcendentals"] >= 8 * HIDDEN
    param_bytes = 4 * (IN * HIDDEN + HIDDEN + HIDDEN * OUT)
    assert p.parameter_bytes == p.gradient_bytes == param_bytes
    assert p.optimiser_state_bytes == param_bytes  # one momentum trace
    assert p.host_bytes_per_micro_batch == 8 * IN * 4 + 8 * 4
    assert p.micro_batch_size == 8 and p.gradient_accumulation == 3
    assert p.update_flops > 0 and p.num_ops > 0
    assert p.precision == "float32"
    # tanh's output is saved for the backward pass.
    assert p.activation_bytes >= 8 * HIDDEN * 4
    # gcl's rule settles `auto` for the layout: one replica, then 16 (a small all-reduce).
    assert p.collectives == (
        hardware.CollectiveRecord("all_reduce", "clockwise_ring", "all", param_bytes),
    )
    sixteen = profile(8, layout=hardware.ReplicaLayout(16, 4))
    assert [r.method for r in sixteen.collectives] == ["meet_in_middle_ring"]


def test_auto_is_priced_as_the_ring_gcl_runs():
    """A 4 MiB all-reduce of 16 replicas over 4 instances: gcl runs the clockwise ring for
    it; the record says so and the model prices that ring, 1.9x what the cheapest of the
    four rings would cost (what `auto` was priced at before the record settled it)."""
    n = 4 << 20
    layout, pod16 = hardware.ReplicaLayout(16, 4), hardware.get_system("pod16")
    params = {"w": jax.ShapeDtypeStruct((n // 4,), jnp.float32)}
    p = profile_step(
        lambda q, x: jax.tree.map(jnp.zeros_like, q),
        params=params,
        batch=(jax.ShapeDtypeStruct((2, 3), jnp.float32),),
        layout=layout,
    )
    (record,) = p.collectives
    assert record == hardware.CollectiveRecord("all_reduce", "clockwise_ring", "all", n)
    parameters = hardware.load_parameters()
    priced = hardware.collective_time(record, layout, pod16, parameters).total
    cheapest = min(
        hardware.collective_time(record._replace(method=m), layout, pod16, parameters).total
        for m in hardware.COLLECTIVE_METHODS
    )
    assert priced > 1.5 * cheapest
    assert hardware.simulate_step(p, layout, pod16).phases["allreduce"] == pytest.approx(priced)


def test_profile_works_on_arrays_too():
    params, opt_state, x, y = shapes(4)
    concrete = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), (params, opt_state, x, y))
    p = profile_step(
        grad_fn, update_fn, params=concrete[0], opt_state=concrete[1], batch=concrete[2:]
    )
    assert p == profile(4)


def test_rts_profiles_a_reduce_scatter_and_an_all_gather():
    p = profile(
        4,
        settings={"replicated_tensor_sharding": True},
        method="clockwise_ring",
        group="consecutive(2)",
        layout=hardware.ReplicaLayout(4),
    )
    assert [(r.kind, r.method, r.group) for r in p.collectives] == [
        ("reduce_scatter", "clockwise_ring", "consecutive(2)"),
        ("all_gather", "clockwise_ring", "consecutive(2)"),
    ]


def test_half_precision_weights_profile_as_float16():
    params, _, x, y = shapes(4)
    half = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, jnp.float16), params)
    assert profile_step(grad_fn, params=half, batch=(x, y)).precision == "float16"


def test_micro_batch_must_be_inferable():
    params, _, _, _ = shapes(4)
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    with pytest.raises(ValueError, match="could not infer `micro_batch_size`"):
        profile_step(lambda p, s: jax.tree.map(jnp.zeros_like, p), params=params, batch=(scalar,))


def test_larger_micro_batch_never_less_memory_or_time():
    layout = hardware.ReplicaLayout(4, 2)
    pod16 = hardware.get_system("pod16")
    sims = [hardware.simulate_step(profile(b, loss=loss_fn), layout, pod16) for b in (2, 8, 32)]
    totals = [s.memory.total for s in sims]
    assert totals == sorted(totals) and totals[0] < totals[-1]
    activations = [s.memory.categories["activations"] for s in sims]
    assert activations == sorted(activations) and activations[0] < activations[-1]
    compute = [s.phases["compute"] for s in sims]
    assert compute == sorted(compute)
    assert np.all(np.diff([s.profile.grad_flops for s in sims]) > 0)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"micro_batch_size": 0}, "`micro_batch_size` must be a positive integer, got 0"),
        ({"micro_batch_size": 2, "device_iterations": 1.5}, "`device_iterations` must be"),
        (
            {"micro_batch_size": 2, "collectives": (("all_reduce", "auto", "all", 64),)},
            "holds method 'auto'",
        ),
    ],
)
def test_settings_are_checked_when_made_as_the_profile_checks_them(fields, words):
    """StepSettings extends hardware.RunSettings: one definition of each setting and of its
    check, so a bad value is refused where it is written, not at the first profile."""
    assert issubclass(StepSettings, hardware.RunSettings)
    assert issubclass(hardware.StepProfile, hardware.RunSettings)
    with pytest.raises(ValueError, match=words):
        StepSettings(**fields)
    with pytest.raises(TypeError, match="micro_batch_size"):
        StepSettings()
