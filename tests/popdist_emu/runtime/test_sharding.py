"""Replicated tensor sharding: shard layout, domains, the element-wise check, and bit-identity
of RTS training with all-reduce training through gcl (one instance here, two under poprun-emu)."""

import math
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
from hardware import ReplicaLayout
from popdist_emu import AllReduceUpdate, TrainState
from popdist_emu.runtime._elementwise import check_elementwise
from popdist_emu.runtime._sharded_update import (
    ShardedReduceUpdate,
    init_sharded_state,
    shard_state,
    sharded_stage,
    sharded_state_nbytes,
    unshard_state,
)
from popdist_emu.runtime._sharding import (
    ShardingError,
    padded_size,
    plan_sharding,
    resolve_domain,
    shard,
    shard_real_elements,
    shard_size,
    unshard,
)

POWERS = [1, 2, 4, 8]
shapes_st = st.lists(st.lists(st.integers(1, 7), max_size=3), min_size=1, max_size=4)


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _tree(shapes, rng, dtype=np.float32):
    return {f"p{i}": rng.standard_normal(s).astype(dtype) for i, s in enumerate(shapes)}


def _bytes_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.asarray(x).dtype == np.asarray(y).dtype
        and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        for x, y in zip(la, lb, strict=True)
    )


# -- shard sizes, padding, shard / unshard ----------------------------------------------------
def test_thirty_elements_over_four_replicas():
    assert shard_size(30, 4) == 8
    assert padded_size(30, 4) == 32
    # gcl's layout (the team contract): zero padding at the end of the last shard.
    assert shard_real_elements(30, 4) == (8, 8, 8, 6)
    x = np.arange(1, 31, dtype=np.float32)
    np.testing.assert_array_equal(shard(x, 3, 4), [25, 26, 27, 28, 29, 30, 0, 0])


@settings(max_examples=30)
@given(n=st.integers(0, 200), g=st.integers(1, 16))
def test_shard_sizes_and_padding(n, g):
    s = shard_size(n, g)
    assert s == math.ceil(n / g)
    real = shard_real_elements(n, g)
    assert len(real) == g and sum(real) == n
    assert all(0 <= r <= s for r in real)
    assert padded_size(n, g) - n == g * s - n < g or n == 0


@settings(max_examples=20)
@given(shapes=shapes_st, g=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_shard_unshard_round_trip(shapes, g, seed):
    tree = _tree(shapes, np.random.default_rng(seed))
    shards = [shard(tree, p, g) for p in range(g)]
    for s in shards:
        for leaf, full in zip(jax.tree.leaves(s), jax.tree.leaves(tree), strict=True):
            assert leaf.shape == (shard_size(full.size, g),)
    assert _bytes_equal(unshard(shards, tree), tree)
    padding = np.concatenate([s["p0"] for s in shards])[tree["p0"].size :]
    assert not padding.any()


@settings(max_examples=10)
@given(shapes=shapes_st, r=st.sampled_from(POWERS), seed=st.integers(0, 2**16))
def test_shard_is_gcl_reduce_scatter_layout(shapes, r, seed):
    tree = _tree(shapes, np.random.default_rng(seed))
    zeros = jax.tree.map(np.zeros_like, tree)
    # Adding zeros is exact, so each replica's reduce-scatter output is exactly its shard.
    scattered = gcl.reduce_scatter([tree] + [zeros] * (r - 1), "add")
    for p in range(r):
        assert _bytes_equal(scattered[p], shard(tree, p, r))


def test_shard_position_out_of_range():
    with pytest.raises(ShardingError, match=r"`position` must lie in \[0, 4\)"):
        shard(np.zeros(3), 4, 4)


# -- sharding domains and threshold ------------------------------------------------------------
def test_default_domains_follow_popart():
    assert resolve_domain(None, num_replicas=8, num_instances=1) == 8
    assert resolve_domain(None, num_replicas=8, num_instances=2) == 4
    assert resolve_domain(gcl.All(), num_replicas=8, num_instances=1) == 8
    assert resolve_domain(gcl.Consecutive(2), num_replicas=8, num_instances=2) == 2
    assert resolve_domain(4, num_replicas=8, num_instances=1) == 4


@pytest.mark.parametrize(
    ("domain", "instances", "match"),
    [
        (gcl.All(), 2, r"gcl.All\(\) is not supported with 2 instances .* gcl.Consecutive\(4\)"),
        (gcl.Orthogonal(2), 1, "a domain must be consecutive replicas"),
        (gcl.Consecutive(3), 1, r"must be a group size that divides the 8 replicas"),
        (0, 1, r"must be a group size that divides the 8 replicas"),
    ],
)
def test_refused_domains(domain, instances, match):
    with pytest.raises(ShardingError, match=match):
        resolve_domain(domain, num_replicas=8, num_instances=instances)


@settings(max_examples=20)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=5),
    r=st.sampled_from(POWERS),
    data=st.data(),
)
def test_threshold_keeps_small_tensors_whole(sizes, r, data):
    k = data.draw(st.sampled_from(_divisors(r)))
    threshold = data.draw(st.one_of(st.none(), st.integers(0, 50)))
    params = {f"p{i}": np.zeros(n, np.float32) for i, n in enumerate(sizes)}
    plan = plan_sharding(params, num_replicas=r, domain=k, min_elements=threshold)
    limit = k if threshold is None else threshold
    assert plan.domain_size == k and plan.num_domains == r // k
    for n, sharded in zip(sizes, plan.sharded, strict=True):
        assert sharded == (n > 0 and n >= limit and k > 1)


@settings(max_examples=25)
@given(shapes=shapes_st, r=st.sampled_from([*POWERS, 16]), data=st.data())
def test_owned_elements_partition_every_leaf(shapes, r, data):
    k = data.draw(st.sampled_from(_divisors(r)))
    tree = _tree(shapes, np.random.default_rng(r))
    plan = plan_sharding(tree, num_replicas=r, domain=k, min_elements=2)
    total = sum(math.prod(s) for s in shapes) + 1  # + the loss, last in the accumulator
    assert plan.chunk == math.ceil(total / r)
    for leaf, value in enumerate(jax.tree.leaves(tree)):
        n = value.size
        for d in range(plan.num_domains):
            rebuilt = np.full(n, np.nan, value.dtype)
            counts = np.zeros(n, int)
            for p in range(k):
                owned = plan.take(leaf, d * k + p, value)
                assert owned.size == plan.owned(leaf, d * k + p)
                plan.put(leaf, d * k + p, owned, rebuilt)
                plan.put(leaf, d * k + p, np.ones(owned.size, int), counts)
            assert rebuilt.tobytes() == value.reshape(-1).tobytes()
            # Every element has exactly one owner per domain (whole leaves: every replica).
            assert (counts == 1).all()
        if plan.sharded[leaf]:
            # A replica owns D chunks' worth of the flat vector at most: about 1/k.
            assert all(plan.owned(leaf, p) <= plan.num_domains * plan.chunk for p in range(k))


# -- the sharded optimiser state and update ----------------------------------------------------
OPTIMISERS = {
    "adamw": lambda: optax.adamw(3e-2, weight_decay=0.1),
    "adam": lambda: optax.adam(1e-2),
    "sgd": lambda: optax.sgd(0.1, momentum=0.9, nesterov=True),
}


def _update_fn(optimiser, scale):
    """The runtime's update contract: ``(params, opt_state, grad_flat)``, flat leaves in tree
    order, scaled first, then the optax update (jitted, donating its inputs)."""

    def update(params, opt_state, grad_flat):
        grad_flat = grad_flat * scale
        leaves, treedef = jax.tree.flatten(params)
        parts, at = [], 0
        for leaf in leaves:
            parts.append(grad_flat[at : at + leaf.size].reshape(leaf.shape).astype(leaf.dtype))
            at += leaf.size
        updates, opt_state = optimiser.update(jax.tree.unflatten(treedef, parts), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return jax.jit(update, donate_argnums=(0, 1))


@settings(max_examples=15)
@given(
    shapes=shapes_st,
    r=st.sampled_from(POWERS),
    name=st.sampled_from(sorted(OPTIMISERS)),
    data=st.data(),
)
def test_state_shards_round_trip(shapes, r, name, data):
    k = data.draw(st.sampled_from(_divisors(r)))
    params = _tree(shapes, np.random.default_rng(r))
    optimiser = OPTIMISERS[name]()
    plan = plan_sharding(params, num_replicas=r, domain=k)
    rng = np.random.default_rng(r + 1)
    state = jax.tree.map(  # a state with distinct values everywhere, scalars kept
        lambda x: rng.standard_normal(np.shape(x)).astype(x.dtype) if np.ndim(x) else x,
        optimiser.init(params),
    )
    domain = list(range(k))
    sharded = shard_state(plan, state, domain)
    assert _bytes_equal(unshard_state(plan, sharded, domain, range(k)), state)
    for replica, part in enumerate(sharded.shards):
        for leaf, mirror in zip(part, sharded.mirrors, strict=True):
            if mirror is not None and plan.sharded[mirror]:
                assert leaf.shape == (plan.owned(mirror, replica),)


@pytest.mark.parametrize(
    "optimiser",
    [
        optax.lamb(1e-3),
        optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3)),
        optax.adafactor(1e-3),
        optax.lars(1e-2),
    ],
    ids=["lamb", "clip_by_global_norm", "adafactor", "lars"],
)
def test_cross_element_optimisers_are_refused(optimiser):
    params = {"w": jnp.ones((4, 6)), "b": jnp.ones(6)}
    with pytest.raises(ShardingError, match=r"needs an element-wise optimiser.*\['reduce_sum'\]"):
        check_elementwise(optimiser, params)


def test_state_memory_scales_with_the_domain():
    params = {"w": jnp.zeros((64, 32)), "b": jnp.zeros(32), "s": jnp.zeros(3)}
    optimiser = optax.adam(1e-3)
    full = sharded_state_nbytes(optimiser, plan_sharding(params, num_replicas=1))
    assert full == 4 + 2 * 4 * (64 * 32 + 32 + 3)
    for r, instances, cut in ((8, 1, 8), (8, 2, 4), (16, 4, 4)):
        plan = plan_sharding(params, num_replicas=r, num_instances=instances)
        got = sharded_state_nbytes(optimiser, plan)
        # The small tensor (3 < k elements) stays whole; the rest is cut k-fold (+ a chunk's
        # rounding).
        assert full / got == pytest.approx(cut, rel=0.03)


# -- RTS training through gcl: bit-identical to all-reduce training ----------------------------
def _flat_sums(params, r, rng):
    n = sum(np.size(x) for x in jax.tree.leaves(params)) + 1
    return [jnp.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(r)]


def _train_both(params, r, domain, method, steps, seed, optimiser):
    rng = np.random.default_rng(seed)
    update = _update_fn(optimiser, 1.0 / r)
    base = AllReduceUpdate(update, method=method)
    plan = plan_sharding(params, num_replicas=r, domain=domain)
    check_elementwise(optimiser, params, plan)
    rts = ShardedReduceUpdate(plan, update, 0, method=method)
    copy = lambda t: jax.tree.map(jnp.array, t)  # noqa: E731 - the updates donate their inputs
    a = TrainState(copy(params), optimiser.init(params))
    b = TrainState(copy(params), init_sharded_state(optimiser, plan, params, range(r)))
    for _ in range(steps):
        sums = _flat_sums(params, r, rng)
        ra, rb = base(a, sums), rts(b, sums)
        assert ra.finite and rb.finite
        assert ra.loss_sum == rb.loss_sum
        a, b = ra.state, rb.state
    return a.params, b.params


@settings(max_examples=10)
@given(
    shapes=shapes_st,
    r=st.sampled_from(POWERS),
    method=st.sampled_from(["auto", *gcl.METHODS]),
    name=st.sampled_from(sorted(OPTIMISERS)),
    data=st.data(),
)
def test_rts_training_bit_identical_to_all_reduce(shapes, r, method, name, data):
    domain = data.draw(st.sampled_from([None, gcl.All(), *map(gcl.Consecutive, _divisors(r))]))
    params = _tree([*shapes, [30]], np.random.default_rng(r))  # 30: padding for r in (4, 8)
    base, rts = _train_both(params, r, domain, method, 3, r + 1, OPTIMISERS[name]())
    assert _bytes_equal(base, rts)


def test_weight_decay_mask_on_ndim_trains_bit_identically():
    # The update runs on full-shape arrays, so shape-dependent masks keep working.
    by_ndim = optax.adamw(3e-2, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p))
    params = _tree([(6, 5), (30,), (5,)], np.random.default_rng(0))
    base, rts = _train_both(params, 4, None, "auto", 3, 1, by_ndim)
    assert _bytes_equal(base, rts)


def test_rts_replaces_all_reduce_by_reduce_scatter_and_all_gathers():
    params = {"w": jnp.zeros((8, 8)), "b": jnp.zeros(2)}
    plan = plan_sharding(params, num_replicas=8, num_instances=2)
    stage = ShardedReduceUpdate(plan, None)
    acc = jax.ShapeDtypeStruct((67,), jnp.float32)  # 66 gradient elements, then the loss
    records = stage.collectives(acc)
    assert [(c.kind, c.group) for c in records] == [
        ("reduce_scatter", "all"),
        ("all_reduce", "all"),
        ("all_gather", "orthogonal(2)"),
        ("all_gather", "consecutive(4)"),
    ]
    assert records[0].bytes == 4 * 67
    assert records[1].bytes == 4 * (2 + 2)  # b (whole), the loss, the finite flag
    assert records[2].bytes == 4 * 2 * 9  # two domains' chunks of ceil(67 / 8)
    assert records[3].bytes == 4 * 4 * 18  # the domain's four pieces of two chunks


def test_non_finite_gradient_leaves_the_state_untouched():
    params = {"w": jnp.ones(16)}
    optimiser = optax.sgd(0.1)
    plan = plan_sharding(params, num_replicas=4)
    stage = ShardedReduceUpdate(plan, _update_fn(optimiser, 0.25))
    state = TrainState(params, init_sharded_state(optimiser, plan, params, range(4)))
    sums = [np.ones(17, np.float32) for _ in range(4)]
    sums[0][13] = np.nan  # lands in replica 3's chunk only: every replica must still refuse
    result = stage(state, sums)
    assert not result.finite
    assert result.state is state


# -- across instances under poprun-emu ---------------------------------------------------------
JOB = """
import sys
import jax, jax.numpy as jnp, numpy as np, optax
import popdist_emu as popdist
from popdist_emu import AllReduceUpdate, TrainState
from popdist_emu.runtime._sharded_update import ShardedReduceUpdate, init_sharded_state
from popdist_emu.runtime._sharding import plan_sharding

r, local = popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas()
offset, instances = popdist.getReplicaIndexOffset(), popdist.getNumInstances()
optimiser = optax.adamw(3e-2, weight_decay=0.1)

def update(params, opt_state, grad_flat):
    leaves, treedef = jax.tree.flatten(params)
    parts, at = [], 0
    for leaf in leaves:
        parts.append((grad_flat[at : at + leaf.size] / r).reshape(leaf.shape))
        at += leaf.size
    updates, opt_state = optimiser.update(jax.tree.unflatten(treedef, parts), opt_state, params)
    return optax.apply_updates(params, updates), opt_state

update = jax.jit(update, donate_argnums=(0, 1))
rng = np.random.default_rng(0)
params = {name: rng.standard_normal(shape).astype(np.float32)
          for name, shape in (("w", (5, 6)), ("v", 30), ("b", 3))}
domain = int(sys.argv[2]) if len(sys.argv) > 2 else None
plan = plan_sharding(params, num_replicas=r, num_instances=instances, domain=domain)
base = AllReduceUpdate(update, timeout=60)
rts = ShardedReduceUpdate(plan, update, offset, timeout=60)
copy = lambda t: jax.tree.map(jnp.array, t)
a = TrainState(copy(params), optimiser.init(params))
mine = range(offset, offset + local)
b = TrainState(copy(params), init_sharded_state(optimiser, plan, params, mine))
for step in range(3):
    # A replica's accumulator is a function of its global index only.
    sums = [jnp.asarray(np.random.default_rng([step, g]).standard_normal(64).astype(np.float32))
            for g in mine]
    a, b = base(a, sums).state, rts(b, sums).state
if popdist.getInstanceIndex() == 0:
    np.savez(sys.argv[1], domain=plan.domain_size,
             **{"base_" + k: np.asarray(v) for k, v in a.params.items()},
             **{"rts_" + k: np.asarray(v) for k, v in b.params.items()})
"""


@pytest.mark.skipif(shutil.which("poprun-emu") is None, reason="poprun-emu is not installed")
def test_rts_across_instances_bit_identical(tmp_path):
    job = tmp_path / "rts_job.py"
    job.write_text(textwrap.dedent(JOB))
    results = {}
    # (instances, domain): all 4 replicas on one instance; each instance's 2 replicas (the
    # default with 2 instances); domains of 2 that span instances of 1 replica each.
    for instances, domain in ((1, None), (2, None), (4, 2)):
        out = tmp_path / f"out_{instances}.npz"
        cmd = ["poprun-emu", "--num-replicas", "4", "--num-instances", str(instances)]
        args = [str(job), str(out)] + ([] if domain is None else [str(domain)])
        proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=within(180))
        assert proc.returncode == 0, f"{instances} instances failed:\n{proc.stderr[-3000:]}"
        with np.load(out) as saved:
            results[instances] = {k: saved[k] for k in saved.files}
    assert [int(results[n]["domain"]) for n in (1, 2, 4)] == [4, 2, 2]
    for res in results.values():
        for name in ("w", "v", "b"):
            assert res[f"rts_{name}"].tobytes() == res[f"base_{name}"].tobytes(), name
    for n in (2, 4):
        for name in ("w", "v", "b"):
            assert results[1][f"rts_{name}"].tobytes() == results[n][f"rts_{name}"].tobytes()


def test_sharded_stage_refuses_global_norm_clipping():
    optimiser = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1))
    with pytest.raises(ShardingError, match="needs an element-wise optimiser"):
        sharded_stage(
            optimiser,
            {"w": np.zeros(64, np.float32)},
            None,
            layout=ReplicaLayout(num_replicas=4),
            instance=0,
        )


# -- the levers wired into the runtime's Trainer, as the lead will wire them -------------------
def _mlp_loss(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def test_trainer_with_rts_and_infeed_matches_plain_trainer():
    import popdist_emu as popdist

    rng = np.random.default_rng(3)
    data = (rng.standard_normal((96, 12)).astype(np.float32), rng.integers(0, 5, 96))
    params = {
        "w1": rng.standard_normal((12, 9)).astype(np.float32) * 0.3,
        "b1": np.zeros(9, np.float32),
        "w2": rng.standard_normal((9, 5)).astype(np.float32) * 0.3,
    }
    options = popdist.Options(replication_factor=4, gradient_accumulation=2)
    optimiser = optax.adamw(5e-2, weight_decay=0.1)

    def train(rts):
        trainer = popdist.Trainer(_mlp_loss, optimiser, params, options, timeout=within(60))
        if rts:
            trainer.reduce_update, opt_state = sharded_stage(
                optimiser,
                trainer.state.params,
                trainer.update_fn,
                layout=options.layout,
                instance=options.instance_index,
                domain=options.sharding_domain,
                timeout=within(60),
            )
            trainer.state = TrainState(trainer.state.params, opt_state)
        loader = popdist.ReplicaLoader(data, 3, options, seed=1)
        with popdist.Infeed(loader.batch, 4, prefetch_depth=2, workers=2) as feed:
            losses = [trainer.step(batch) for batch in feed]
        return trainer.params, losses, trainer.collectives(loader.batch(0))

    plain, plain_losses, plain_collectives = train(False)
    sharded, sharded_losses, sharded_collectives = train(True)
    assert sharded_losses == plain_losses
    assert _bytes_equal(sharded, plain)
    assert [c.kind for c in plain_collectives] == ["all_reduce"]
    assert sharded_collectives[0].kind == "reduce_scatter"
