"""Writes BERT pre-training records in the TFRecord layout Graphcore's BERT reads.

Graphcore's ``nlp/bert/pytorch`` cannot train on more than one host instance from its
``--dataset generated``: that data set holds one instance's combined batch, and PopTorch's
``DataLoader`` gives each process a block of ``len(dataset) // processes`` samples (its
``_SubDataset``), less than a batch, so no step would run. Its other data set,
``--dataset pretraining``, reads TFRecord files (``input_files``, by default
``data/*.tfrecord`` with an ``.index`` beside each) of the keys ``pretraining_data.py``'s
``TFRECORD_KEYS`` names. This writes such files from random tokens (a seeded NumPy
generator), as Google's ``create_pretraining_data.py`` would lay them out, so that
``benchmarks/graphcore_programs.py`` runs the unchanged program on any number of instances.
It runs with the application's interpreter (``--python``), whose ``tfrecord`` package
(Graphcore's requirement) writes and indexes the files.

Usage::

    VENV/bin/python benchmarks/bert_pretraining_records.py OUT_DIR [--files 2]
        [--records 64] [--sequence-length 128] [--mask-tokens 20] [--vocab-size 30522]

References:
    graphcore/examples at 3cc8f81f, ``nlp/bert/pytorch/pretraining_data.py``
    (``TFRecordPretrainingDataset``, ``TFRECORD_KEYS``) and ``configs_pretraining.yml``;
    google-research/bert, ``create_pretraining_data.py`` (the features of a record);
    PopTorch, ``poptorch/_dataloader.py`` (``_SubDataset``: each process's block).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def records(
    count: int, sequence_length: int, mask_tokens: int, vocab_size: int, seed: int
) -> list[dict[str, tuple[list[int], str]]]:
    """``count`` records of random tokens, each with its masked positions and their
    labels, in the ``tfrecord`` writer's ``{key: (values, "int")}`` form."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        positions = np.sort(rng.choice(sequence_length, mask_tokens, replace=False))
        out.append(
            {
                "input_ids": (rng.integers(0, vocab_size, sequence_length).tolist(), "int"),
                "input_mask": ([1] * sequence_length, "int"),
                "segment_ids": ([0] * sequence_length, "int"),
                "masked_lm_positions": (positions.tolist(), "int"),
                "masked_lm_ids": (rng.integers(0, vocab_size, mask_tokens).tolist(), "int"),
                "next_sentence_labels": ([int(rng.integers(0, 2))], "int"),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder of the .tfrecord and .index files")
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--records", type=int, default=64, help="records per file")
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--mask-tokens", type=int, default=20)
    parser.add_argument("--vocab-size", type=int, default=30522)
    args = parser.parse_args(argv)
    try:
        from tfrecord.tools.tfrecord2idx import create_index
        from tfrecord.writer import TFRecordWriter
    except ImportError as error:
        parser.error(f"{error}: run with the BERT application's interpreter (its tfrecord)")
    args.out.mkdir(parents=True, exist_ok=True)
    for k in range(args.files):
        path = args.out / f"pretraining_{k}.tfrecord"
        writer = TFRecordWriter(str(path))
        for record in records(
            args.records, args.sequence_length, args.mask_tokens, args.vocab_size, seed=k
        ):
            writer.write(record)
        writer.close()
        create_index(str(path), str(path.with_suffix(".index")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
