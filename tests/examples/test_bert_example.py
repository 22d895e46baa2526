"""examples/bert.py offline from shapes (tiny), its stage placement and its refusals; the
BERT model, data and optimisers of the examples' package it runs (``pipelined_training``)."""

import json
import math
import os
from unittest import mock

import pipelined_training
import pytest
from repo_scripts import load_example


@pytest.fixture(scope="module")
def bert():
    return load_example("bert")


def test_stages_put_embeddings_first_and_heads_last(bert):
    stages = bert.stages("base", [3, 3, 3, 3])
    assert stages[0].blocks == ("embeddings", "layer00", "layer01", "layer02")
    assert stages[-1].blocks[-1] == "heads" and len(stages) == 4
    assert bert.layers_per_ipu(None, 24, 8) == [3] * 8
    assert sum(bert.layers_per_ipu(None, 12, 5)) == 12


def test_layers_per_ipu_refused_in_one_line(bert, capsys):
    with pytest.raises(SystemExit) as exit_:
        bert.layers_per_ipu("3,7,7", 24, 4)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--layers-per-ipu '3,7,7' must give 4" in err and "\n" not in err


def test_offline_tiny_pipeline_from_shapes(bert, capsys):
    env = {"POPDIST_EMU_OFFLINE": "1", "POPDIST_NUM_IPUS_PER_REPLICA": "2"}
    with mock.patch.dict(os.environ, env):
        report = bert.main(
            ["--model", "tiny", "--sequence-length", "16", "--recompute", "--precision", "fp32"]
        )
    out = capsys.readouterr().out
    line = json.loads(out.strip().splitlines()[-1])
    assert line == report and report["offline"] and report["ipus_per_replica"] == 2
    assert report["gradient_accumulation"] == 3  # 2 x 2 - 1, PopTorch's least for 2 stages
    assert report["parameters"] > 100_000 and len(report["memory_per_ipu_per_stage"]) == 2
    assert "pipeline: pipelined over 2 IPUs with recomputation" in out


def test_available_memory_proportion_per_ipu(bert, capsys):
    """One proportion per IPU (Graphcore's BERT configurations list them): each IPU's matmuls
    are planned with its own, as the printed per-IPU lines say; a count that is neither 1 nor
    the IPUs per replica is refused in one line."""
    env = {"POPDIST_EMU_OFFLINE": "1", "POPDIST_NUM_IPUS_PER_REPLICA": "2"}
    argv = ["--model", "tiny", "--sequence-length", "16", "--precision", "fp32"]
    with mock.patch.dict(os.environ, env):
        report = bert.main([*argv, "--available-memory-proportion", "0.3", "0.2"])
        out = capsys.readouterr().out
        assert report["available_memory_proportion"] == {"IPU0": 0.3, "IPU1": 0.2}
        assert "IPU0: always-live" in out and "availableMemoryProportion 0.3," in out
        assert "IPU1: always-live" in out and "availableMemoryProportion 0.2," in out
        with pytest.raises(SystemExit) as exit_:
            bert.main([*argv, "--available-memory-proportion", "0.3", "0.2", "0.1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "one per IPU of the replica (2)" in err and "\n" not in err


def test_model_too_large_for_one_ipu_is_refused_before_compiling(bert, capsys):
    env = {"POPDIST_EMU_OFFLINE": "1", "POPDIST_NUM_IPUS_PER_REPLICA": "1"}
    with mock.patch.dict(os.environ, env), pytest.raises(SystemExit) as exit_:
        bert.main(["--model", "base", "--sequence-length", "128"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "Out of memory: IPU 0 (stage 0: embeddings, layer00 ... heads, 14 blocks)"
    )
    assert "more IPUs per replica (--ipus-per-replica 2)" in err


def test_lamb_with_replicated_tensor_sharding_runs_and_shards_the_state(bert, capsys, tmp_path):
    """Graphcore's BERT trains with LAMB and RTS: LAMB's state is sharded over the 4 replicas
    (its per-tensor norms all-reduced over the domain), so each IPU holds a quarter of it."""
    env = {
        "POPDIST_EMU_OFFLINE": "1",
        "POPDIST_NUM_IPUS_PER_REPLICA": "2",
        "POPDIST_NUM_TOTAL_REPLICAS": "4",
        "POPDIST_NUM_LOCAL_REPLICAS": "4",
    }
    argv = ["--model", "tiny", "--sequence-length", "16", "--precision", "fp32"]
    state = {}
    for flags in ((), ("--replicated-tensor-sharding",)):
        report_dir = tmp_path / ("rts" if flags else "whole")
        with mock.patch.dict(os.environ, {**env, "POPDIST_EMU_REPORT_DIR": str(report_dir)}):
            bert.main([*argv, *flags])
        summary = json.loads((report_dir / "summary.json").read_text())
        state[bool(flags)] = [s["memory"]["optimizer_state"] for s in summary["pipeline"]["stages"]]
    capsys.readouterr()
    for sharded, whole in zip(state[True], state[False], strict=True):
        assert sharded == pytest.approx(whole / 4, rel=0.01)


V2_POD64 = "[[1,[3,3]],[2,[3,3]],[3,[3,3]],[4,[4,3]],[5,[3,4]],[6,[4,3]],[7,[3,4]],[0,[1,1]]]"


def test_graphcores_placements_wrap_round_to_ipu_0(bert):
    """The MLPerf v2.0 Bow configurations' att_ffn_placement with encoder_start_ipu 1 and the
    tied decoder: nine stages on eight IPUs, attention and FFN halves apart, the last layer
    and the heads back on IPU 0; v1.0's POD16 layers_per_ipu [3,7,7,7] with a tied decoder
    puts the heads in a stage of their own on IPU 0."""
    placement = bert.att_ffn_placement(V2_POD64, 24, 8)
    stages = bert.stages("large", att_ffn=placement, encoder_start_ipu=1, tied=True)
    assert [s.ipu for s in stages] == [0, 1, 2, 3, 4, 5, 6, 7, 0]
    assert stages[0].blocks == ("embeddings",)
    assert stages[4].blocks == (
        *("attention09", "ffn09", "attention10", "ffn10"),
        *("attention11", "ffn11", "attention12"),
    )
    assert stages[5].blocks[0] == "ffn12"
    assert stages[-1].blocks == ("attention23", "ffn23", "heads")
    mk2 = bert.stages("large", [3, 7, 7, 7], tied=True)
    assert [s.ipu for s in mk2] == [0, 1, 2, 3, 0] and mk2[-1].blocks == ("heads",)
    assert bert.stages("large", [3, 7, 7, 7])[-1].blocks[-2:] == ("layer23", "heads")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[[1, 3]]", "is not a JSON list like"),
        ("[[1, [0, 1]], [0, [24, 23]]]", "entry [1, [0, 1]]"),
        ("[[1, [12, 12]], [9, [12, 12]]]", "entry [9, [12, 12]]: the IPU must be in 0..7"),
        ("[[1, [12, 12]], [2, [11, 11]]]", "places 23 attention and 23 FFN layers"),
    ],
)
def test_att_ffn_placement_refused_in_one_line(bert, capsys, text, match):
    with pytest.raises(SystemExit) as exit_:
        bert.att_ffn_placement(text, 24, 8)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err


def test_split_and_tied_models_compute_the_layer_models_loss(bert):
    """Attention and FFN as blocks of their own compose to the same loss and gradients as
    whole layers; a tied decoder's gradient reaches the word embeddings."""
    import jax
    import jax.numpy as jnp

    seq = 8
    params = pipelined_training.init_bert_params(
        "tiny", seq, jnp.float32, jax.random.PRNGKey(0), tied=True
    )
    data = pipelined_training.synthetic_pretraining_data("tiny", seq, 2, 4, 0)
    batch = tuple(jnp.asarray(x) for x in data)
    layers = pipelined_training.bert_block_model("tiny", tied=True)
    split = pipelined_training.bert_block_model("tiny", split=True, tied=True)
    assert [b.name for b in split.blocks][1:5] == ["attention00", "ffn00", "attention01", "ffn01"]
    split_loss, grads = jax.jit(jax.value_and_grad(split))(params, batch)
    whole_loss, whole = jax.jit(jax.value_and_grad(layers))(params, batch)
    assert float(split_loss) == pytest.approx(float(whole_loss), rel=1e-6)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(whole), strict=True):
        assert jnp.allclose(a, b, rtol=1e-5, atol=1e-7)
    untied = pipelined_training.bert_param_shapes("tiny", seq, jnp.float32)
    assert "w" not in params["heads"]["decoder"] and "w" in untied["heads"]["decoder"]
    # Tied, the masked-LM loss reaches the embedding rows of the labels' tokens directly.
    assert not jnp.allclose(grads["embeddings"]["word"], 0.0)


def test_a_wrapped_round_tied_pipeline_stores_the_embeddings_once(bert, capsys, tmp_path):
    """Five stages on four IPUs, the heads back on IPU 0 with the embeddings they share: IPU
    0's weights are the embeddings and the heads' own, once each, and the report names the
    five stages on their IPUs."""
    import jax
    import jax.numpy as jnp

    env = {
        "POPDIST_EMU_OFFLINE": "1",
        "POPDIST_NUM_IPUS_PER_REPLICA": "4",
        "POPDIST_EMU_REPORT_DIR": str(tmp_path),
    }
    argv = ["--model", "tiny", "--sequence-length", "16", "--precision", "fp32"]
    placement = "[[1, [1, 1]], [2, [1, 0]], [3, [0, 1]]]"
    extra = ["--encoder-start-ipu", "1", "--tied-decoder", "--att-ffn-placement", placement]
    with mock.patch.dict(os.environ, env):
        report = bert.main([*argv, *extra])
    out = capsys.readouterr().out
    assert "pipeline: pipelined over 4 IPUs (5 stages)" in out
    assert [s["ipu"] for s in report["stages"]] == [0, 1, 2, 3, 0]
    assert report["gradient_accumulation"] == 9  # 2 x 5 stages - 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    ipus = summary["pipeline"]["ipus"]
    assert [i["stages"] for i in ipus] == [[0, 4], [1], [2], [3]]
    shapes = pipelined_training.bert_param_shapes("tiny", 16, jnp.float32, tied=True)

    def nbytes(tree):
        return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))

    held = nbytes(shapes["embeddings"]) + nbytes(shapes["heads"])
    assert ipus[0]["memory"]["weights"] == held
    assert len(report["memory_per_ipu"]) == 4


def test_squad_fine_tuning_learns_the_synthetic_answers(bert, capsys):
    """``--task squad``: the span head on every token, AdamW in float16 weights; the loss
    starts at chance (ln of the sequence length, for the start and the end) and falls as
    the model learns where the synthetic answers' marker tokens are."""
    env = {"POPDIST_NUM_IPUS_PER_REPLICA": "2"}
    argv = ["--model", "tiny", "--task", "squad", "--optimiser", "adam", "--steps", "60"]
    with mock.patch.dict(os.environ, env):
        report = bert.main([*argv, "--sequence-length", "32", "--learning-rate", "3e-3"])
    capsys.readouterr()
    assert report["task"] == "squad" and report["optimiser"] == "adam"
    assert abs(report["first_loss"] - math.log(32)) < 0.3, report["first_loss"]
    assert report["final_loss"] < 0.3 * report["first_loss"], report["final_loss"]


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--task", "squad", "--tied-decoder"], "--tied-decoder is pre-training's"),
        (["--task", "squad", "--max-predictions", "4"], "--max-predictions is pre-training's"),
        (
            ["--optimiser", "adam", "--half-optimiser-state", "--half-first-order-momentum"],
            "not both",
        ),
        (["--half-optimiser-state", "--half-first-order-momentum"], "not both"),
    ],
)
def test_squad_and_adam_flags_refused_in_one_line(bert, capsys, flags, match):
    with pytest.raises(SystemExit) as exit_:
        bert.parse_args(["--model", "tiny", *flags])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert match in err[-1]


def test_adamw_in_float32_is_adamw_and_stays_finite_in_float16():
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    params = {"w": jnp.linspace(-1.0, 1.0, 8), "b": jnp.zeros(3)}
    grads = {"w": jnp.linspace(0.5, -0.5, 8), "b": jnp.zeros(3)}
    ours, theirs = pipelined_training.adamw_in_float32(1e-2), optax.adamw(1e-2)
    got, _ = ours.update(grads, ours.init(params), params)
    want, _ = theirs.update(grads, theirs.init(params), params)
    for name in params:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-9)
    # Float16 weights: optax.adamw's eps rounds to zero and a zero gradient gives 0/0.
    half = jax.tree.map(lambda x: x.astype(jnp.float16), (params, grads))
    naive, _ = theirs.update(half[1], theirs.init(half[0]), half[0])
    assert not np.isfinite(np.asarray(naive["b"])).all()
    stored = pipelined_training.adamw_in_float32(1e-2, jnp.float16)
    state = stored.init(half[0])
    updates, state = stored.update(half[1], state, half[0])
    assert all(np.isfinite(np.asarray(u)).all() for u in jax.tree.leaves(updates))
    assert {u.dtype for u in jax.tree.leaves(updates)} == {jnp.dtype(jnp.float16)}
    floats = [x for x in jax.tree.leaves(state) if jnp.issubdtype(x.dtype, jnp.floating)]
    assert floats and {x.dtype for x in floats} == {jnp.dtype(jnp.float16)}


def _adam_state(state):
    """The Adam moments (optax's ``ScaleByAdamState``: ``mu`` and ``nu``) inside an
    optimiser's state, wherever the optimiser nests them."""
    import jax

    (adam,) = [
        s for s in jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu")
    ]
    return adam


def test_half_first_order_momentum_stores_only_the_first_moment_in_float16():
    """PopTorch's ``first_order_momentum_accum_type=float16``: the first moment in float16,
    the second in float32, and the update the same AdamW as with both moments in float32
    to float16's precision."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    params = {"w": jnp.linspace(-1.0, 1.0, 8)}
    grads = {"w": jnp.linspace(0.5, -0.5, 8)}
    half_first = pipelined_training.adamw_in_float32(1e-2, jnp.float32, jnp.float16)
    state = half_first.init(params)
    updates, state = half_first.update(grads, state, params)
    adam = _adam_state(state)
    assert {x.dtype for x in jax.tree.leaves(adam.mu)} == {jnp.dtype(jnp.float16)}
    assert {x.dtype for x in jax.tree.leaves(adam.nu)} == {jnp.dtype(jnp.float32)}
    want, _ = optax.adamw(1e-2).update(grads, optax.adamw(1e-2).init(params), params)
    np.testing.assert_allclose(updates["w"], want["w"], rtol=1e-3)


@pytest.mark.parametrize(
    ("flags", "first", "second"),
    [
        ([], "float32", "float32"),
        (["--half-first-order-momentum"], "float16", "float32"),
        (["--half-optimiser-state"], "float16", "float16"),
    ],
)
def test_lamb_moments_are_float32_unless_the_flags_say_float16(bert, flags, first, second):
    """Graphcore's LAMB keeps its moments in float32 (lamb_m_dtype, lamb_accl_dtype FLOAT16
    halve one or both) whatever the weights' precision; the update is popdist.lamb's on
    float32 weights, to float16's precision, and finite where float16 arithmetic is not."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import popdist_emu as popdist

    ours = bert.make_optimiser(
        bert.parse_args(["--model", "tiny", "--learning-rate", "1e-2", *flags])
    )
    params = {"w": jnp.linspace(-1.0, 1.0, 8), "b": jnp.ones(3)}
    grads = {"w": jnp.linspace(5e-4, -5e-4, 8), "b": jnp.full(3, 1e-4)}
    half = jax.tree.map(lambda x: x.astype(jnp.float16), (params, grads))
    state = ours.init(half[0])
    adam = _adam_state(state)
    assert {x.dtype for x in jax.tree.leaves(adam.mu)} == {jnp.dtype(first)}
    assert {x.dtype for x in jax.tree.leaves(adam.nu)} == {jnp.dtype(second)}
    updates, _ = ours.update(half[1], state, half[0])
    want, _ = popdist.lamb(1e-2).update(grads, popdist.lamb(1e-2).init(params), params)
    for name in params:
        assert updates[name].dtype == jnp.float16
        np.testing.assert_allclose(updates[name], want[name], rtol=2e-2, atol=1e-5)
    # In float16 throughout, 1e-4 squared (1e-8) underflows: the second moment is zero.
    naive, _ = popdist.lamb(1e-2).update(half[1], popdist.lamb(1e-2).init(half[0]), half[0])
    assert not np.allclose(np.asarray(naive["w"], np.float32), want["w"], rtol=0.1)
