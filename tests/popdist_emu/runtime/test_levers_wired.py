"""RTS and optimiser offloading switched on through Options: the Trainer picks the stage.

In-process tests cover one instance (any replica count); the PopRun test runs
examples/train.py on 2 instances, where the default sharding domain is each instance's
replicas, and compares the saved parameters byte for byte.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from deadlines import within

import popdist_emu as popdist

TRAIN = Path(__file__).parents[3] / "examples" / "train.py"


def _loss(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return optax.softmax_cross_entropy_with_integer_labels(h @ params["w2"], y).mean()


def _params(rng):
    # 108 + 9 + 45 = 162 elements; every leaf reaches the default threshold (the domain
    # size), so all of them are sharded.
    return {
        "w1": rng.standard_normal((12, 9)).astype(np.float32) * 0.3,
        "b1": np.zeros(9, np.float32),
        "w2": rng.standard_normal((9, 5)).astype(np.float32) * 0.3,
    }


def _train(replicas, steps=3, **levers):
    rng = np.random.default_rng(7)
    data = (rng.standard_normal((128, 12)).astype(np.float32), rng.integers(0, 5, 128))
    options = popdist.Options(
        replication_factor=replicas, gradient_accumulation=2, output_mode="all", **levers
    )
    trainer = popdist.Trainer(_loss, optax.adamw(5e-2), _params(rng), options, timeout=within(60))
    loader = popdist.ReplicaLoader(data, 2, options, seed=1)
    losses = [trainer.step(loader.batch(i)).tolist() for i in range(steps)]
    return trainer, losses, loader


def _same_bytes(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        np.asarray(x).tobytes() == np.asarray(y).tobytes()
        for x, y in zip(leaves_a, leaves_b, strict=True)
    )


@pytest.mark.parametrize("replicas", [2, 8])
def test_rts_and_offload_train_bit_identically_to_the_plain_trainer(replicas):
    plain, plain_losses, _ = _train(replicas)
    for levers in (
        {"replicated_tensor_sharding": True},
        {"offload_optimiser": True},
        {"replicated_tensor_sharding": True, "offload_optimiser": True},
    ):
        trainer, losses, _ = _train(replicas, **levers)
        assert losses == plain_losses, levers
        assert _same_bytes(trainer.params, plain.params), levers


def test_rts_divides_the_optimiser_state_by_the_domain_and_swaps_the_collectives():
    plain, _, loader = _train(8, steps=1)
    rts, _, _ = _train(8, steps=1, replicated_tensor_sharding=True)
    full = plain.optimiser_state_bytes_per_replica
    info = rts.lever_info
    assert plain.lever_info == popdist.LeverInfo(full, 1, 0)
    assert info.sharding_domain_size == 8 and info.offload_bytes_per_update == 0
    # Adam's two moments of 162 elements: ceil(162 / 8) = 21 owned each, plus the count.
    assert full / 8 <= info.optimiser_state_bytes_per_replica < full / 8 + 4 * 8
    assert isinstance(rts.state.opt_state, popdist.ShardedOptState)
    kinds = [c.kind for c in rts.collectives(loader.batch(0))]
    assert kinds == ["reduce_scatter", "all_reduce", "all_gather"]
    assert [c.kind for c in plain.collectives(loader.batch(0))] == ["all_reduce"]


def test_offload_keeps_no_state_on_chip_and_streams_it_every_update():
    plain, _, _ = _train(2, steps=1)
    offloaded, _, _ = _train(2, steps=1, offload_optimiser=True)
    full = plain.optimiser_state_bytes_per_replica
    assert offloaded.lever_info == popdist.LeverInfo(0, 1, 2 * full)
    assert isinstance(offloaded.state.opt_state, popdist.StreamingState)
    assert offloaded.state.opt_state.nbytes == full
    both, _, _ = _train(2, steps=1, offload_optimiser=True, replicated_tensor_sharding=True)
    sharded = _train(2, steps=1, replicated_tensor_sharding=True)[0].lever_info
    assert both.lever_info == popdist.LeverInfo(0, 2, 2 * sharded.optimiser_state_bytes_per_replica)


def test_rts_refuses_a_cross_element_optimiser():
    options = popdist.Options(replication_factor=2, replicated_tensor_sharding=True)
    clipped = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2))
    with pytest.raises(popdist.ShardingError, match="element-wise optimiser"):
        popdist.Trainer(_loss, clipped, _params(np.random.default_rng(0)), options)


def test_rts_takes_the_sharding_domain_from_options():
    params = _params(np.random.default_rng(0))
    options = popdist.Options(
        replication_factor=4, replicated_tensor_sharding=True, sharding_domain=2
    )
    trainer = popdist.Trainer(_loss, optax.adamw(1e-2), params, options)
    assert trainer.lever_info.sharding_domain_size == 2
    bad = popdist.Options(replication_factor=4, replicated_tensor_sharding=True, sharding_domain=3)
    with pytest.raises(popdist.ShardingError, match="must be a group size that divides"):
        popdist.Trainer(_loss, optax.adamw(1e-2), params, bad)


def test_offline_mode_plans_rts_from_shapes():
    shapes = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _params(np.random.default_rng(0))
    )
    batch = (
        jax.ShapeDtypeStruct((1, 1, 4, 2, 12), jnp.float32),
        jax.ShapeDtypeStruct((1, 1, 4, 2), jnp.int32),
    )
    with mock.patch.dict(os.environ, {"POPDIST_EMU_OFFLINE": "1"}):
        options = popdist.Options(replication_factor=4, replicated_tensor_sharding=True)
        trainer = popdist.Trainer(_loss, optax.adamw(1e-2), shapes, options)
        compiled = trainer.compile(batch)
        assert trainer.state is None
    assert compiled.collectives[0].kind == "reduce_scatter"
    assert trainer.lever_info.sharding_domain_size == 4


def _poprun(tmp_path, name, *flags):
    path = tmp_path / f"{name}.npz"
    cmd = [
        sys.executable, "-m", "launch", "--num-replicas", "8", "--num-instances", "2",
        str(TRAIN), "--steps", "4", "--save", str(path), *flags,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=within(180), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.strip().endswith("}")][-1]
    report = json.loads(line[line.index("{") :])
    with np.load(path) as saved:
        return {k: saved[k].tobytes() for k in saved.files}, report


def test_train_example_with_rts_on_two_instances_gives_the_same_params(tmp_path):
    # Offloading changes nothing across instances (the same all-reduce stage), so the
    # in-process tests cover it; RTS on 2 instances has its own domain and collectives.
    plain, report = _poprun(tmp_path, "plain")
    params, rts = _poprun(tmp_path, "rts", "--replicated-tensor-sharding")
    assert params == plain
    assert rts["final_loss"] == report["final_loss"]
    assert (report["instances"], rts["sharding_domain_size"]) == (2, 4)
    cut = report["optimiser_state_bytes_per_replica"] / rts["optimiser_state_bytes_per_replica"]
    assert 3.9 < cut <= 4.0
    assert report["offload_bytes_per_update"] == rts["offload_bytes_per_update"] == 0
