"""Stages on any IPU, several stages on one IPU and a weight shared by blocks on one IPU.

Graphcore's MLPerf BERT runs its embeddings and the masked-LM decoder, tied to the word
embeddings, on IPU 0, the decoder as the pipeline's last stage: the numbers must be those of
the unpipelined model, whatever the placement, and the hardware model must store the tied
weight once.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popdist_emu as popdist
from popdist_emu.runtime._replica_step import make_micro_step, zero_accumulator

WIDTH, VOCAB = 5, 7


def _embed(p, batch):
    return jnp.tanh(p["emb"][batch["tokens"]].sum(1)), batch["labels"]


def _layer(name):
    def fn(p, carry):
        h, labels = carry
        return jnp.tanh(h @ p[name]), labels

    return fn


def _decode(p, carry):
    h, labels = carry
    logits = h @ p["emb"].T  # the decoder's weight is the embedding's
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(labels.shape[0]), labels])


TIED = popdist.BlockModel(
    [
        popdist.Block("emb", _embed, ("emb",)),
        popdist.Block("L0", _layer("l0"), ("l0",)),
        popdist.Block("L1", _layer("l1"), ("l1",)),
        popdist.Block("head", _decode, ("emb",)),
    ]
)


def _params():
    k = jax.random.split(jax.random.PRNGKey(3), 3)
    return {
        "emb": jax.random.normal(k[0], (VOCAB, WIDTH)) * 0.5,
        "l0": jax.random.normal(k[1], (WIDTH, WIDTH)) * 0.5,
        "l1": jax.random.normal(k[2], (WIDTH, WIDTH)) * 0.5,
    }


def _micro_batches(ga):
    rng = np.random.default_rng(0)
    return [
        {
            "tokens": jnp.asarray(rng.integers(0, VOCAB, (3, 2)), jnp.int32),
            "labels": jnp.asarray(rng.integers(0, VOCAB, (3,)), jnp.int32),
        }
        for _ in range(ga)
    ]


def _accumulate(stages, cls, ipus, ga):
    p = _params()
    # Compiled as the runtime compiles: every example's pipelines share the stage programs.
    pipe = popdist.Pipeline(
        TIED, cls(*stages), p, ipus_per_replica=ipus, gradient_accumulation=ga,
        compile=popdist.compile_program,
    )  # fmt: skip
    acc, finite = pipe.accumulate(p, _micro_batches(ga), zero_accumulator(p, jnp.float32))
    assert finite
    return pipe, np.asarray(acc)


WRAP = (
    popdist.Stage("emb", ipu=0),
    popdist.Stage("L0", ipu=1),
    popdist.Stage("L1", ipu=2),
    popdist.Stage("head", ipu=0),
)


@settings(max_examples=4)
@given(extra=st.integers(0, 3))
def test_a_wrapped_round_pipeline_with_a_tied_weight_gives_the_unpipelined_sums(extra):
    ga = 2 * len(WRAP) - 1 + extra
    _, pipelined = _accumulate(WRAP, popdist.PipelinedExecution, 3, ga)
    _, sharded = _accumulate(WRAP, popdist.ShardedExecution, 3, ga)
    assert pipelined.tobytes() == sharded.tobytes()
    step, p = make_micro_step(TIED), _params()
    acc = zero_accumulator(p, jnp.float32)
    for mb in _micro_batches(ga):
        acc, _ = step(p, acc, mb)
    np.testing.assert_allclose(pipelined, np.asarray(acc), rtol=2e-5, atol=1e-6)


def test_placement_changes_no_number_and_a_tied_weight_is_stored_once():
    ga = 7
    one_each = [popdist.Stage("emb", "L0"), popdist.Stage("L1", "head")]
    pipe, wrapped = _accumulate(WRAP, popdist.PipelinedExecution, 3, ga)
    _, reversed_ipus = _accumulate(
        [popdist.Stage("emb", ipu=2), popdist.Stage("L0", ipu=0), popdist.Stage("L1", ipu=1),
         popdist.Stage("head", ipu=2)],
        popdist.PipelinedExecution, 3, ga,
    )  # fmt: skip
    assert wrapped.tobytes() == reversed_ipus.tobytes()
    with pytest.raises(popdist.PipelineError, match=r"'emb' is used by blocks \['emb', 'head'\]"):
        _accumulate(one_each, popdist.PipelinedExecution, 2, ga)
    p = _params()
    assert set(pipe.stage_params(p, 3)) == {"emb"}  # the decoder computes with it...
    assert pipe.held_params(p, 3) == {}  # ...but IPU 0 stores it once, for stage 0


@pytest.mark.parametrize(
    ("stages", "ipus", "match"),
    [
        (WRAP, 2, "placed on IPU 2 but a replica has --ipus-per-replica 2"),
        (WRAP, 4, "leave IPU 3 of the replica's 4 without a stage"),
    ],
)
def test_placements_a_replica_cannot_hold_are_refused_in_one_line(stages, ipus, match):
    with pytest.raises(popdist.PipelineError, match=match) as err:
        _accumulate(stages, popdist.ShardedExecution, ipus, 1)
    assert "\n" not in str(err.value)


def test_the_wrap_round_needs_the_accumulation_of_its_stages_not_of_its_ipus():
    """PopTorch counts pipeline stages: four stages on three IPUs need 2 x 4 - 1."""
    with pytest.raises(popdist.PipelineError, match="the 7 pipeline stages of training"):
        _accumulate(WRAP, popdist.PipelinedExecution, 3, 5)
