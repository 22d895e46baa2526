"""One source for the collectives: for every reduce-and-update stage, the records the stage
produces in a functional run equal those of the offline run of the same configuration, and
equal what gcl executed (``gcl.recording``), each with the method gcl resolved."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gcl
import popdist_emu


def loss_fn(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def params(hidden):
    rng = np.random.default_rng(0)
    return {
        "w1": (rng.standard_normal((8, hidden)) * 0.1).astype(np.float32),
        "b1": np.zeros(hidden, np.float32),
        "w2": (rng.standard_normal((hidden, 2)) * 0.1).astype(np.float32),
    }


def batch(options, micro=2):
    lead = (options.device_iterations, options.gradient_accumulation, options.replication_factor)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((*lead, micro, 8)).astype(np.float32)
    return x, rng.standard_normal((*lead, micro, 2)).astype(np.float32)


STAGES = {
    "all-reduce": ({}, 16),
    "all-reduce, over 1 MiB": ({}, 40_000),
    "rts, one domain": ({"replicated_tensor_sharding": True}, 16),
    "rts, two domains": ({"replicated_tensor_sharding": True, "sharding_domain": 2}, 16),
    "offloading": ({"offload_optimiser": True}, 16),
    "rts + offloading": ({"replicated_tensor_sharding": True, "offload_optimiser": True}, 16),
}


@pytest.mark.parametrize("stage", STAGES)
def test_functional_offline_and_executed_records_agree(stage):
    levers, hidden = STAGES[stage]
    options = popdist_emu.Options(replication_factor=4, gradient_accumulation=2, **levers)
    values = params(hidden)
    functional = popdist_emu.Trainer(loss_fn, optax.adam(1e-3), values, options, offline=False)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), values)
    offline = popdist_emu.Trainer(loss_fn, optax.adam(1e-3), shapes, options, offline=True)
    data = batch(options)
    recorded = functional.compile(data).collectives
    with gcl.recording() as executed:
        functional.step(data)
    assert tuple(executed) == recorded
    batch_shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), data)
    assert offline.compile(batch_shapes).collectives == recorded
    # What the hardware model prices is what ran: no `auto` left in the records.
    assert all(r.method in gcl.METHODS for r in recorded)
    profile = popdist_emu.simulate(offline, batch_shapes).profile
    assert profile.collectives == recorded


def test_auto_resolves_by_size_and_group_as_gcl_runs_it():
    assert gcl.collective_method("all_reduce", 1000, 16) == "meet_in_middle_ring"
    assert gcl.collective_method("all_reduce", 2 << 20, 16) == "clockwise_ring"
    assert gcl.collective_method("reduce_scatter", 1000, 2) == "clockwise_ring"
    assert gcl.collective_method("all_gather", 1000, 16) == "clockwise_ring"
    assert gcl.collective_method("all_reduce", 1000, 16, "bidirectional_ring_pair") == (
        "bidirectional_ring_pair"
    )
    with pytest.raises(ValueError, match="`kind` must be one of"):
        gcl.collective_method("all_to_all", 1000, 16)
