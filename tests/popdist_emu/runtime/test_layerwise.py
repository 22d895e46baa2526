"""LAMB and LARS under replicated tensor sharding: the per-tensor norms reduced over the
sharding domain, equal to the whole-tensor update, the same bits on any instance layout."""

import shutil
import subprocess
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from deadlines import within
from hypothesis import given, settings
from hypothesis import strategies as st

import gcl
import popdist_emu
from hardware import ReplicaLayout
from popdist_emu import AllReduceUpdate, TrainState
from popdist_emu.programs import PROGRAM_CACHE
from popdist_emu.runtime import layerwise
from popdist_emu.runtime._layerwise import owned_squares
from popdist_emu.runtime._replica_step import make_update
from popdist_emu.runtime._sharded_update import ShardedReduceUpdate, sharded_stage
from popdist_emu.runtime._sharding import ShardingError, plan_sharding

shapes_st = st.lists(st.lists(st.integers(1, 7), max_size=3), min_size=1, max_size=4)


def _tree(shapes, rng):
    return {f"p{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}


def _copy(tree):
    return jax.tree.map(jnp.array, tree)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (
            lambda: popdist_emu.lamb(optax.linear_schedule(1e-2, 1e-3, 5), weight_decay=0.01),
            lambda: optax.lamb(optax.linear_schedule(1e-2, 1e-3, 5), weight_decay=0.01),
        ),
        (
            lambda: popdist_emu.lars(0.1, weight_decay=1e-4, momentum=0.9),
            lambda: optax.lars(0.1, weight_decay=1e-4, momentum=0.9),
        ),
    ],
    ids=["lamb", "lars"],
)
def test_unsharded_update_is_optax_bit_for_bit(ours, theirs):
    rng = np.random.default_rng(0)
    params = _tree([(6, 5), (30,), (3,)], rng)
    a, b = ours(), theirs()
    pa, pb, sa, sb = _copy(params), _copy(params), a.init(params), b.init(params)
    for _ in range(4):
        grads = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), x.dtype), params)
        ua, sa = a.update(grads, sa, pa)
        ub, sb = b.update(grads, sb, pb)
        pa, pb = optax.apply_updates(pa, ua), optax.apply_updates(pb, ub)
    for name in params:
        assert np.asarray(pa[name]).tobytes() == np.asarray(pb[name]).tobytes(), name


def _train(params, r, domain, steps, seed, optimiser):
    """All-reduce training and RTS training side by side on one instance of ``r`` replicas."""
    rng = np.random.default_rng(seed)
    update = make_update(optimiser, 1.0 / r)
    base = AllReduceUpdate(update)
    rts, opt_state = sharded_stage(
        optimiser,
        params,
        update,
        layout=ReplicaLayout(num_replicas=r),
        instance=0,
        domain=domain,
        scale=1.0 / r,
    )
    a = TrainState(_copy(params), optimiser.init(params))
    b = TrainState(_copy(params), opt_state)
    n = sum(np.size(x) for x in params.values()) + 1
    for _ in range(steps):
        sums = [jnp.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(r)]
        ra, rb = base(a, sums), rts(b, sums)
        assert ra.finite and rb.finite and ra.loss_sum == rb.loss_sum
        a, b = ra.state, rb.state
    return a.params, b.params, rts


def test_rts_clips_each_weight_by_its_own_max_weight_norm():
    """Per-weight clips (LAMB's parameter groups: Graphcore's BERT gives its biases 0, the
    others none) under RTS: each shard finishes with its own weight's clip, as whole-tensor
    training does, and the clips change the result."""
    params = _tree([[30], [4, 5], [7]], np.random.default_rng(0))
    inner = optax.chain(optax.scale_by_adam(), optax.add_decayed_weights(0.1))
    tail = optax.scale_by_learning_rate(1e-2)
    clips = (("p0", 0.0), ("p1", None), ("p2", 0.5))
    per_weight = layerwise(inner, tail, max_weight_norm=clips)
    base, rts, _ = _train(params, 4, None, 3, 5, per_weight)
    unclipped, _, _ = _train(params, 4, None, 3, 5, layerwise(inner, tail))
    for name in params:
        np.testing.assert_allclose(rts[name], base[name], rtol=2e-6, atol=1e-7)
    assert np.array_equal(base["p1"], unclipped["p1"])  # no clip: LAMB's own step
    for name in ("p0", "p2"):  # clipped below the weight's norm: another step
        assert not np.allclose(base[name], unclipped[name], rtol=1e-4), name


@settings(max_examples=10, derandomize=True, deadline=None)
@given(shapes=shapes_st, r=st.sampled_from([2, 4, 8]), lars=st.booleans(), data=st.data())
def test_rts_training_equals_whole_tensor_training(shapes, r, lars, data):
    domain = data.draw(st.sampled_from([None, *(gcl.Consecutive(k) for k in (2, r))]))
    params = _tree([*shapes, [30]], np.random.default_rng(r))  # 30: sharded, padded
    optimiser = (
        popdist_emu.lars(0.5, weight_decay=1e-3)
        if lars
        else popdist_emu.lamb(1e-2, weight_decay=0.1)
    )
    base, rts, stage = _train(params, r, domain, 3, r + 1, optimiser)
    assert stage.layerwise is not None
    for name in params:
        # Only the norms' summation order differs: float64 pieces against XLA's float32 sum.
        np.testing.assert_allclose(rts[name], base[name], rtol=2e-6, atol=1e-7)
        assert not np.array_equal(params[name], rts[name])  # it trained


def test_the_layerwise_passes_are_programs_of_the_process_cache(compiles):
    """Stages of the same optimiser share the compiled passes from the process's one program
    cache and hold them; the cached jitted passes are keys only, holding no program: once
    the cache dropped them, a new stage compiles them again."""
    params = _tree([(6, 5), (30,)], np.random.default_rng(0))
    optimiser = popdist_emu.lamb(1e-2, weight_decay=0.1)
    *_, first = _train(params, 4, None, 1, 0, optimiser)
    *_, second = _train(params, 4, None, 1, 1, optimiser)
    assert None not in first.layerwise.programs
    for a, b in zip(first.layerwise.programs, second.layerwise.programs, strict=True):
        assert a is b
    PROGRAM_CACHE.clear()
    compiles.clear()
    *_, third = _train(params, 4, None, 1, 2, optimiser)
    passes = [name for name in compiles if "direction" in name or "finish" in name]
    assert len(passes) == 2, compiles
    assert third.layerwise.programs[0] is not first.layerwise.programs[0]


@settings(max_examples=20, derandomize=True, deadline=None)
@given(shapes=shapes_st, r=st.sampled_from([1, 2, 4, 8]), seed=st.integers(0, 2**16))
def test_owned_squares_sum_over_the_domain_to_each_whole_norm(shapes, r, seed):
    params = _tree([*shapes, [30]], np.random.default_rng(seed))
    plan = plan_sharding(params, num_replicas=r)
    parts = [owned_squares(plan, replica, params, params) for replica in range(r)]
    for leaf, x in enumerate(plan.treedef.flatten_up_to(params)):
        whole = float(np.sum(np.square(x, dtype=np.float64)))
        assert sum(p[0, leaf] for p in parts) == pytest.approx(whole, rel=1e-12)


def test_whole_optax_lamb_is_still_refused_naming_the_shardable_one():
    with pytest.raises(ShardingError, match=r"popdist_emu\.lamb"):
        sharded_stage(
            optax.lamb(1e-3),
            {"w": np.zeros(64, np.float32)},
            None,
            layout=ReplicaLayout(num_replicas=4),
            instance=0,
        )


def test_the_norms_all_reduce_is_a_recorded_collective():
    params = {"w": jnp.zeros((8, 8)), "b": jnp.zeros(2)}
    optimiser = popdist_emu.lamb(1e-3)
    stage, _ = sharded_stage(
        optimiser,
        {k: np.asarray(v) for k, v in params.items()},
        make_update(optimiser, 0.125),
        layout=ReplicaLayout(num_replicas=8, num_instances=2),
        instance=0,
        scale=0.125,
    )
    plain = ShardedReduceUpdate(stage.plan, None)
    acc = jax.ShapeDtypeStruct((67,), jnp.float32)
    records, without = stage.collectives(acc), plain.collectives(acc)
    assert len(records) == len(without) + 1
    norms = records[2]
    assert (norms.kind, norms.group) == ("all_reduce", "consecutive(4)")
    assert norms.bytes == 4 * 2 * 2  # two leaves, the weights' and the direction's norm


# -- across instances under poprun-emu ---------------------------------------------------------
JOB = """
import sys
import jax, jax.numpy as jnp, numpy as np
import popdist_emu as popdist
from popdist_emu import TrainState
from popdist_emu.runtime import layerwise
from popdist_emu.runtime._layerwise import owned_squares
from popdist_emu.runtime._replica_step import make_update
from popdist_emu.runtime._sharded_update import sharded_stage
from hardware import ReplicaLayout

r, local = popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas()
offset, instances = popdist.getReplicaIndexOffset(), popdist.getNumInstances()
optimiser = popdist.lamb(1e-2, weight_decay=0.1)
update = make_update(optimiser, 1.0 / r)
rng = np.random.default_rng(0)
params = {name: rng.standard_normal(shape).astype(np.float32)
          for name, shape in (("w", (5, 6)), ("v", 30), ("b", 3))}
layout = ReplicaLayout(num_replicas=r, num_instances=instances)
stage, opt_state = sharded_stage(
    optimiser, params, update, layout=layout, instance=popdist.getInstanceIndex(),
    domain=popdist_emu_domain, scale=1.0 / r, timeout=60)
state = TrainState(jax.tree.map(jnp.array, params), opt_state)
mine = range(offset, offset + local)
for step in range(3):
    sums = [jnp.asarray(np.random.default_rng([step, g]).standard_normal(64).astype(np.float32))
            for g in mine]
    state = stage(state, sums).state
if popdist.getInstanceIndex() == 0:
    np.savez(sys.argv[1], domain=stage.plan.domain_size,
             **{k: np.asarray(v) for k, v in state.params.items()})
"""


@pytest.mark.skipif(shutil.which("poprun-emu") is None, reason="poprun-emu is not installed")
def test_rts_lamb_same_bits_on_every_instance_layout(tmp_path):
    job = tmp_path / "lamb_job.py"
    # Domains of 2 replicas: within one instance, or spanning two instances of one replica.
    job.write_text("import gcl\npopdist_emu_domain = gcl.Consecutive(2)\n" + textwrap.dedent(JOB))
    results = {}
    for instances in (1, 2, 4):
        out = tmp_path / f"out_{instances}.npz"
        cmd = ["poprun-emu", "--num-replicas", "4", "--num-instances", str(instances)]
        proc = subprocess.run(
            [*cmd, str(job), str(out)], capture_output=True, text=True, timeout=within(180)
        )
        assert proc.returncode == 0, f"{instances} instances failed:\n{proc.stderr[-3000:]}"
        with np.load(out) as saved:
            results[instances] = {k: saved[k] for k in saved.files}
    assert {int(res["domain"]) for res in results.values()} == {2}
    for n in (2, 4):
        for name in ("w", "v", "b"):
            assert results[1][name].tobytes() == results[n][name].tobytes(), (n, name)
