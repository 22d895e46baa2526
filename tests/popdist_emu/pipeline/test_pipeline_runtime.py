"""Pipelined and sharded execution in the runtime: numerics, rules, profile and reports."""

import itertools
import json
import os
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from two_dense_blocks import two_dense_blocks

import hardware
import popdist_emu as popdist
from popdist_emu.runtime._replica_step import make_micro_step, zero_accumulator

WIDTH = 6


def _dense(name, last=False):
    def fn(p, x):
        if isinstance(x, tuple):
            h, labels = x
        else:
            h, labels = x["x"], x["y"]
        h = jnp.tanh(h @ p[name]["w"] + p[name]["b"])
        if last:
            return jnp.mean((h.sum(-1) - labels) ** 2)
        return h, labels

    return fn


MODELS = {}


def model(num_blocks=4):
    """One BlockModel per size, so every test's pipelines share compiled stage programs."""
    if num_blocks in MODELS:
        return MODELS[num_blocks]
    blocks = [
        popdist.Block(f"B{i}", _dense(f"l{i}", i == num_blocks - 1), (f"l{i}",))
        for i in range(num_blocks)
    ]
    MODELS[num_blocks] = popdist.BlockModel(blocks)
    return MODELS[num_blocks]


def params(num_blocks=4, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), num_blocks)
    return {
        f"l{i}": {
            "w": jax.random.normal(keys[i], (WIDTH, WIDTH)) * 0.5,
            "b": jnp.full((WIDTH,), 0.1 * i),
        }
        for i in range(num_blocks)
    }


def micro_batches(ga, seed=1):
    rng = np.random.default_rng(seed)
    return [
        {
            "x": jnp.asarray(rng.normal(size=(3, WIDTH)), jnp.float32),
            "y": jnp.asarray(rng.normal(size=(3,)), jnp.float32),
        }
        for _ in range(ga)
    ]


def split(cuts, n_blocks=4):
    """Stages from sorted cut points, e.g. (1, 3) -> [B0], [B1, B2], [B3]."""
    bounds = [0, *cuts, n_blocks]
    return [popdist.Stage(*[f"B{i}" for i in range(a, b)]) for a, b in itertools.pairwise(bounds)]


def run(stages, cls, ga, recomputation=False):
    m, p = model(), params()
    # Compiled as the runtime compiles (kept in the process's cache): every example's
    # pipelines of the model share its stages' programs.
    pipe = popdist.Pipeline(
        m, cls(*stages), p, ipus_per_replica=len(stages), gradient_accumulation=ga,
        recomputation=recomputation, compile=popdist.compile_program,
    )  # fmt: skip
    zeros = zero_accumulator(p, jnp.float32)
    acc, finite = pipe.accumulate(p, micro_batches(ga), zeros)
    assert finite
    return np.asarray(acc)


@settings(max_examples=5)
@given(
    cuts=st.sets(st.integers(1, 3), max_size=3).map(sorted),
    extra=st.integers(0, 3),
)
def test_pipelined_sharded_recomputed_identical_and_match_unpipelined(cuts, extra):
    stages = split(cuts)
    ga = 2 * len(stages) - 1 + extra
    pipelined = run(stages, popdist.PipelinedExecution, ga)
    sharded = run(stages, popdist.ShardedExecution, ga)
    recomputed = run(stages, popdist.PipelinedExecution, ga, recomputation=True)
    assert pipelined.tobytes() == sharded.tobytes() == recomputed.tobytes()
    # The unpipelined micro-step of the same model accumulates the same sums.
    step, p = make_micro_step(model()), params()
    acc = zero_accumulator(p, jnp.float32)
    for mb in micro_batches(ga):
        acc, _ = step(p, acc, mb)
    np.testing.assert_allclose(pipelined, np.asarray(acc), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("stages", "ipus", "ga", "cls", "match"),
    [
        (split([2]), 4, 8, popdist.PipelinedExecution, "leave IPU 2 of the replica's 4"),
        (split([1, 2, 3]), 4, 6, popdist.PipelinedExecution, "the 7 pipeline stages of training"),
        (
            [popdist.Stage("B1", "B0"), popdist.Stage("B2", "B3")],
            2,
            4,
            popdist.ShardedExecution,
            "exactly one stage, in model order",
        ),
    ],
)
def test_invalid_pipelines_are_refused_in_one_line(stages, ipus, ga, cls, match):
    with pytest.raises(popdist.PipelineError, match=match) as err:
        popdist.Pipeline(
            model(), cls(*stages), params(), ipus_per_replica=ipus, gradient_accumulation=ga
        )
    assert "\n" not in str(err.value)


def test_every_parameter_owned_by_exactly_one_block():
    shared = popdist.BlockModel(
        [
            popdist.Block("B0", _dense("l0"), ("l0",)),
            popdist.Block("B1", _dense("l0", True), ("l0",)),
        ]
    )
    p = {"l0": params(1)["l0"]}
    with pytest.raises(popdist.PipelineError, match="used by blocks"):
        popdist.Pipeline(
            shared, popdist.ShardedExecution("B0", "B1"), p, ipus_per_replica=2,
            gradient_accumulation=1,
        )  # fmt: skip
    p = params(4) | {"orphan": jnp.zeros(2)}
    with pytest.raises(popdist.PipelineError, match="owned by no block"):
        popdist.Pipeline(
            model(), popdist.ShardedExecution(*split([2])), p, ipus_per_replica=2,
            gradient_accumulation=1,
        )  # fmt: skip


def test_trainer_pipelined_simulation_and_reports(tmp_path):
    env = {"POPDIST_NUM_IPUS_PER_REPLICA": "2"}
    with mock.patch.dict(os.environ, env):
        options = popdist.Options(
            replication_factor=1,
            gradient_accumulation=4,
            execution_strategy=popdist.PipelinedExecution(*split([2])),
        )
        trainer = popdist.Trainer(model(), optax.sgd(0.1), params(), options)
        batches = micro_batches(4)
        batch = jax.tree.map(lambda *xs: jnp.stack(xs)[None, :, None], *batches)
        loss = trainer.step(batch)
        assert np.isfinite(loss)
        sim = popdist.simulate(trainer, batch, name="mlp", system="pod16")
    report = sim.pipeline
    assert report.strategy == "pipelined" and len(report.schedule.stages) == 2
    assert all(s.forward_seconds > 0 and s.backward_seconds > 0 for s in report.schedule.stages)
    popdist.report_simulation(sim, trainer.options, report_dir=str(tmp_path))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["memory_per_ipu_total"] == max(
        s["memory_total"] for s in summary["pipeline"]["stages"]
    )
    assert summary["pipeline"]["stages"][1]["blocks"] == ["B2", "B3"]
    assert 0 < summary["pipeline"]["bubble_fraction"] < 1
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in trace if e["name"] == "thread_name"}
    assert {hardware.ipu_track(0), hardware.ipu_track(1)} <= names
    counters = [e for e in trace if e["ph"] == "C"]
    assert {c["name"] for c in counters} == {"memory IPU 0", "memory IPU 1"}


def _stage_plans(proportion):
    """Each IPU's planner report for a 2-stage pipeline planned with ``proportion``."""
    with mock.patch.dict(os.environ, {"POPDIST_NUM_IPUS_PER_REPLICA": "2"}):
        options = popdist.Options(
            replication_factor=1,
            gradient_accumulation=4,
            execution_strategy=popdist.PipelinedExecution(*split([2])),
            available_memory_proportion=proportion,
        )
        trainer = popdist.Trainer(model(), optax.sgd(0.1), params(), options, offline=True)
        batch = jax.tree.map(lambda *xs: jnp.stack(xs)[None, :, None], *micro_batches(4))
        sim = popdist.simulate(trainer, batch, name="mlp", system="pod16")
    return sim, [m.planner for m in sim.pipeline.stage_memory]


def test_each_stage_is_planned_on_its_ipu_with_that_ipus_proportion():
    """PopTorch's per-IPU setting reaches the planner of each stage's IPU: its matmuls (the
    forward and backward of the stage's blocks) are planned with its own proportion, and
    lowering one IPU's proportion leaves the other IPU's plans as they were."""
    _, even = _stage_plans(0.6)
    sim, mapped = _stage_plans({"IPU0": 0.6, "IPU1": 0.01})
    assert [p.summary()["proportions"] for p in mapped] == [[0.6], [0.01]]
    # Two dense blocks per stage: their forward matmuls, their weight gradients and the
    # input gradients, except the first stage's first (its input is data): 5 and 6.
    assert [p.summary()["operations"] for p in mapped] == [5, 6]
    assert mapped[0].summary() == even[0].summary()
    assert mapped[1].worst_tile_temporary_bytes <= even[1].worst_tile_temporary_bytes
    entry = popdist_summary_entry(sim, "IPU1")
    assert entry["available_memory_proportions"] == [0.01]


def popdist_summary_entry(sim, ipu):
    from popdist_emu.reports._planner import available_memory_summary

    return available_memory_summary(sim)[ipu]


def _big_stage_seconds(proportion, recompute):
    """Stage 0's (forward, backward) seconds of a 2-stage pipeline of 1024-wide matmuls."""
    width, micro = 1024, 256
    blocks = two_dense_blocks()
    shapes = {f"w{i}": jax.ShapeDtypeStruct((width, width), jnp.float32) for i in range(2)}
    batch = (
        jax.ShapeDtypeStruct((1, 3, 1, micro, width), jnp.float32),
        jax.ShapeDtypeStruct((1, 3, 1, micro), jnp.float32),
    )
    with mock.patch.dict(os.environ, {"POPDIST_NUM_IPUS_PER_REPLICA": "2"}):
        options = popdist.Options(
            replication_factor=1,
            gradient_accumulation=3,
            execution_strategy=popdist.PipelinedExecution("B0", "B1"),
            recomputation=recompute,
            available_memory_proportion=proportion,
        )
        trainer = popdist.Trainer(blocks, optax.sgd(0.1), shapes, options, offline=True)
        sim = popdist.simulate(trainer, batch, name="wide", system="pod16")
    stage = sim.pipeline.schedule.stages[0]
    return stage.forward_seconds, stage.backward_seconds


def test_the_planners_cycles_go_to_the_stage_passes_that_run_them():
    """At a tiny proportion the plans of stage 0's matmuls cost cycles: its forward pays for
    the forward's matmuls, its backward for the backward's, plus the forward's again only
    when the backward recomputes it (without recomputation the stash keeps the forward's
    results, so the backward's time leaves the forward out)."""
    gain = {}
    for recompute in (False, True):
        (f0, b0), (f1, b1) = (_big_stage_seconds(p, recompute) for p in (0.6, 0.0005))
        gain[recompute] = (f1 - f0, b1 - b0)
    (fwd, bwd), (fwd_r, bwd_r) = gain[False], gain[True]
    assert fwd > 0 and bwd > 0 and fwd == pytest.approx(fwd_r)
    assert bwd_r == pytest.approx(bwd + fwd, rel=1e-6)
