"""Seeded synthetic BERT batches (NOT a corpus, NOT SQuAD) and the shapes of one call's batch.

The tokens are Zipf-distributed, so the masked-LM loss can fall to the unigram entropy; the
next-sentence label is the parity of the second token; a SQuAD answer is a span of 1 to 4
tokens that starts and ends with a marker token, so a model can learn to find it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pipelined_training._bert_model import BERT_CONFIGS

MASK_ID = 3
ANSWER_ID = 2  # the synthetic SQuAD answers' first and last tokens


def _zipf_tokens(
    model: str, seq: int, samples: int, rng: np.random.Generator, vocab: int = 0
) -> np.ndarray:
    """``samples`` sequences of Zipf-distributed tokens, the 4 special ids left out."""
    vocab = vocab or BERT_CONFIGS[model][4]
    ranks = np.arange(1, vocab - 4 + 1)
    prob = 1.0 / ranks / np.sum(1.0 / ranks)
    return (rng.choice(vocab - 4, size=(samples, seq), p=prob) + 4).astype(np.int32)


def synthetic_pretraining_data(
    model: str, seq: int, predictions: int, samples: int, seed: int, vocab: int = 0
) -> tuple:
    """Seeded synthetic pre-training samples (NOT a corpus): Zipf tokens, 15 % masked."""
    rng = np.random.default_rng(seed)
    tokens = _zipf_tokens(model, seq, samples, rng, vocab)
    segments = (np.arange(seq)[None, :] >= seq // 2).astype(np.int32).repeat(samples, 0)
    mask = np.ones((samples, seq), np.int32)
    positions = np.stack([rng.choice(seq, predictions, replace=False) for _ in range(samples)])
    positions = positions.astype(np.int32)
    labels = np.take_along_axis(tokens, positions, 1)
    np.put_along_axis(tokens, positions, MASK_ID, 1)
    weights = np.ones((samples, predictions), np.float32)
    nsp = (labels[:, 0] % 2).astype(np.int32)
    return tokens, segments, mask, positions, labels, weights, nsp


def synthetic_squad_data(model: str, seq: int, samples: int, seed: int, vocab: int = 0) -> tuple:
    """Seeded synthetic SQuAD samples (NOT SQuAD): Zipf tokens, a question in the first
    quarter, an answer span of 1 to 4 tokens in the passage that starts and ends with
    ``ANSWER_ID``, so a model can learn to find it."""
    rng = np.random.default_rng(seed)
    tokens = _zipf_tokens(model, seq, samples, rng, vocab)
    start = rng.integers(seq // 4, seq - 4, samples).astype(np.int32)
    end = (start + rng.integers(0, 4, samples)).astype(np.int32)
    rows = np.arange(samples)
    tokens[rows, start], tokens[rows, end] = ANSWER_ID, ANSWER_ID
    segments = (np.arange(seq)[None, :] >= seq // 4).astype(np.int32).repeat(samples, 0)
    return tokens, segments, np.ones((samples, seq), np.int32), start, end


def bert_batch_shapes(
    options: Any, micro: int, seq: int, predictions: int, task: str = "pretraining"
) -> tuple:
    """One call's batch as shapes: ``device_iterations x gradient_accumulation x
    replication_factor`` micro-batches of the task's inputs and labels."""
    lead = (options.device_iterations, options.gradient_accumulation, options.replication_factor)
    i32 = jnp.int32
    tokens = tuple(jax.ShapeDtypeStruct((*lead, micro, seq), i32) for _ in range(3))
    if task == "squad":  # the answers' start and end positions
        return (*tokens, *(jax.ShapeDtypeStruct((*lead, micro), i32) for _ in range(2)))
    return (
        *tokens,
        jax.ShapeDtypeStruct((*lead, micro, predictions), i32),
        jax.ShapeDtypeStruct((*lead, micro, predictions), i32),
        jax.ShapeDtypeStruct((*lead, micro, predictions), jnp.float32),
        jax.ShapeDtypeStruct((*lead, micro), i32),
    )
