"""BERT in plain JAX (Devlin et al. 2019) as pipeline blocks: its sizes, parameter shapes,
initialisation and blocks, for pre-training (masked-LM and next-sentence heads) or SQuAD
fine-tuning (a span head).

Token, position and segment embeddings with layer norm; encoder layers of multi-head
self-attention and a GELU feed-forward network, each with a residual connection and post
layer norm; a masked-LM head (dense, GELU, layer norm, then a decoder to the vocabulary,
evaluated only at the masked positions, as MLPerf's reference does) and a next-sentence head
on the first token. The decoder has its own weights, or, tied, multiplies by the word
embeddings as BERT and Graphcore's BERT do.

References:
    Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
    Understanding", NAACL 2019 (large: 24 layers, hidden 1024, 16 heads, FFN 4096,
    vocabulary 30,522; SQuAD's span head, section 4.2).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

import popdist_emu
from pipelined_training._layers import attention, dense, init_from_shapes, layer_norm

# (layers, hidden, heads, ffn, vocabulary)
BERT_CONFIGS = {
    "tiny": (2, 64, 2, 256, 512),
    "base": (12, 768, 12, 3072, 30522),
    "large": (24, 1024, 16, 4096, 30522),
}
# Graphcore's BERT ``task``: pre-training (masked-LM and next-sentence heads) or SQuAD
# fine-tuning (a span head on every token).
BERT_TASKS = ("pretraining", "squad")

_layer_norm = functools.partial(layer_norm, eps=1e-12)


def bert_param_shapes(
    model: str,
    seq: int,
    dtype: Any,
    *,
    vocab: int = 0,
    tied: bool = False,
    task: str = "pretraining",
) -> dict:
    """Parameter shapes; ``vocab`` overrides the model's vocabulary (Graphcore pads it:
    ``vocab_length`` 30,912 in the MLPerf v2.0 configurations), and a ``tied`` decoder has
    no matrix of its own (it multiplies by the word embeddings), only its bias. SQuAD's head
    is one dense layer to a start and an end logit per token."""
    layers, h, _, f, v = BERT_CONFIGS[model]
    v = vocab or v

    def ln() -> dict:
        return {"scale": (h,), "bias": (h,)}

    decoder = {"b": (v,)} if tied else {"w": (h, v), "b": (v,)}
    pretraining = {
        "transform": {"w": (h, h), "b": (h,)},
        "ln": ln(),
        "decoder": decoder,
        "pooler": {"w": (h, h), "b": (h,)},
        "nsp": {"w": (h, 2), "b": (2,)},
    }
    shapes: dict[str, Any] = {
        "embeddings": {"word": (v, h), "position": (seq, h), "segment": (2, h), "ln": ln()},
        "heads": {"squad": {"w": (h, 2), "b": (2,)}} if task == "squad" else pretraining,
    }
    for i in range(layers):
        shapes[f"attention{i:02d}"] = {
            "qkv": {"w": (h, 3 * h), "b": (3 * h,)},
            "out": {"w": (h, h), "b": (h,)},
            "ln1": ln(),
        }
        shapes[f"ffn{i:02d}"] = {
            "ffn1": {"w": (h, f), "b": (f,)},
            "ffn2": {"w": (f, h), "b": (h,)},
            "ln2": ln(),
        }
    return jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s, dtype), shapes, is_leaf=lambda x: isinstance(x, tuple)
    )


def init_bert_params(
    model: str,
    seq: int,
    dtype: Any,
    key: jax.Array,
    *,
    vocab: int = 0,
    tied: bool = False,
    task: str = "pretraining",
) -> dict:
    """Truncated-normal(0.02) weights, zero biases, unit layer-norm scales (BERT's init)."""
    shapes = bert_param_shapes(model, seq, dtype, vocab=vocab, tied=tied, task=task)
    return init_from_shapes(shapes, key, lambda name, shape: 0.02)


def embeddings_block(p: Any, batch: tuple) -> tuple:
    """Token + position + segment embeddings, layer norm; passes the rest of the batch on
    (the padding mask first, then the task's labels)."""
    tokens, segments, mask, *labels = batch
    e = p["embeddings"]
    x = e["word"][tokens] + e["position"][None, : tokens.shape[1]] + e["segment"][segments]
    return _layer_norm(e["ln"], x), (mask, *labels)


def make_attention_block(i: int, heads: int) -> Callable:
    """Self-attention of encoder layer ``i`` with its residual and post layer norm."""
    name = f"attention{i:02d}"

    def block(p: Any, carry: tuple) -> tuple:
        x, aux = carry
        q = p[name]
        bias = jnp.where(aux[0][:, None, None, :] > 0, 0.0, -1e4)  # the padding mask
        return _layer_norm(q["ln1"], x + attention(q, x, heads, bias)), aux

    return block


def make_ffn_block(i: int) -> Callable:
    """The GELU feed-forward network of encoder layer ``i``, residual and post layer norm."""
    name = f"ffn{i:02d}"

    def block(p: Any, carry: tuple) -> tuple:
        x, aux = carry
        q = p[name]
        ffn = dense(q["ffn2"], jax.nn.gelu(dense(q["ffn1"], x)))
        return _layer_norm(q["ln2"], x + ffn), aux

    return block


def make_layer_block(i: int, heads: int) -> Callable:
    """One encoder layer: self-attention, then the feed-forward network."""
    attention_block, ffn_block = make_attention_block(i, heads), make_ffn_block(i)
    return lambda p, carry: ffn_block(p, attention_block(p, carry))


def make_heads_block(tied: bool) -> Callable:
    """Masked-LM loss at the masked positions plus next-sentence loss; a ``tied`` decoder
    multiplies by the word embeddings (Devlin et al.; Graphcore's BERT), so the block also
    reads the ``embeddings`` entry and must run on the embeddings' IPU."""

    def block(p: Any, carry: tuple) -> jax.Array:
        x, (_, positions, labels, weights, nsp) = carry
        hp = p["heads"]
        picked = jnp.take_along_axis(x, positions[..., None], axis=1)
        t = _layer_norm(hp["ln"], jax.nn.gelu(dense(hp["transform"], picked)))
        if tied:
            logits = t @ p["embeddings"]["word"].T + hp["decoder"]["b"]
        else:
            logits = dense(hp["decoder"], t)
        mlm = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
        w = weights.astype(jnp.float32)
        mlm_loss = (mlm * w).sum() / jnp.maximum(w.sum(), 1.0)
        pooled = jnp.tanh(dense(hp["pooler"], x[:, 0]))
        nsp_logits = dense(hp["nsp"], pooled).astype(jnp.float32)
        nsp_loss = optax.softmax_cross_entropy_with_integer_labels(nsp_logits, nsp).mean()
        return mlm_loss + nsp_loss

    return block


def squad_heads_block(p: Any, carry: tuple) -> jax.Array:
    """SQuAD's span loss: the mean of the start and end positions' cross-entropies over the
    tokens (Devlin et al. 2019, section 4.2)."""
    x, (_, start, end) = carry
    logits = dense(p["heads"]["squad"], x).astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels
    return (ce(logits[..., 0], start).mean() + ce(logits[..., 1], end).mean()) / 2


def bert_block_model(
    model: str, *, split: bool = False, tied: bool = False, task: str = "pretraining"
) -> popdist_emu.BlockModel:
    """``embeddings``, then ``layer00`` ... (or, ``split``, ``attention00``, ``ffn00``, ...:
    blocks finer than a layer, as Graphcore's ``att_ffn_placement`` places them), ``heads``."""
    layers, _, heads, _, _ = BERT_CONFIGS[model]
    blocks = [popdist_emu.Block("embeddings", embeddings_block, ("embeddings",))]
    for i in range(layers):
        keys = (f"attention{i:02d}", f"ffn{i:02d}")
        if split:
            blocks.append(popdist_emu.Block(keys[0], make_attention_block(i, heads), keys[:1]))
            blocks.append(popdist_emu.Block(keys[1], make_ffn_block(i), keys[1:]))
        else:
            blocks.append(popdist_emu.Block(f"layer{i:02d}", make_layer_block(i, heads), keys))
    owned = ("heads", "embeddings") if tied else ("heads",)
    head = squad_heads_block if task == "squad" else make_heads_block(tied)
    blocks.append(popdist_emu.Block("heads", head, owned))
    return popdist_emu.BlockModel(blocks)
