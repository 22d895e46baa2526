"""Checks the hardware model against published throughput it was not fitted on.

Each row is a configuration Graphcore ran and published (``benchmarks/published_rows.md``
lists them with their sources and how MLPerf throughputs are derived from the logs). The
row's step is compiled from shapes (never run) by the example that models it, simulated on
the row's system with the calibrated parameters of ``hardware/calibration.json`` unchanged,
and its prediction set beside the published figure. The rows the parameters were fitted on
are printed apart, labelled as fitted, and left out of the median: the four MLPerf Training
v1.1 ResNet-50 rows (``benchmarks/calibrate.py``) and, with ``--bert``, the BERT family's
four single-Pod Mk2 rows (``benchmarks/calibrate_bert.py``).

Without flags the rows are ResNet-50's, the family ``examples/resnet50.py`` models: MLPerf
Training v1.0 on the Mk2 IPU-POD16 and POD64 (SDK 2.1, an older software stack than the
calibration's SDK 2.3), MLPerf Training v2.0 on Bow-POD16 to Bow-POD256 (SDK 2.5.1, the Bow IPU
at 1.85 GHz: an IPU the calibration never saw), and Graphcore's Bow launch figures at the
MLPerf configurations (v1.0's on the Pod16 and Pod64, v2.0's on the Pod256). With ``--bert``,
BERT-Large rows too, each an offline run of ``examples/bert.py`` under ``poprun-emu`` as
Graphcore's configuration file for the row sets it (its placement, tied decoder, vocabulary,
micro-batch, memory proportions, LAMB with RTS): MLPerf Training v1.0 and v1.1 on the Mk2
IPU-POD16 and POD64 are the family's calibration (v1.1 against its training-only throughput:
the references' figures include evaluation); v1.1 on the POD128 and v2.0 on Bow-POD16 to
Bow-POD256 (an IPU and a software release the BERT fit never saw; PopART, and PaddlePaddle on
the Pod16 and Pod64 with the same configurations) are the checks, with
Graphcore's performance-results rows of BERT on unpacked sequences: three of its TensorFlow 2
BERT on a Bow Pod16 (BERT-Large at 128 tokens, BERT-Base at 128 and 384), seven of its PopART
BERT (BERT-Large at 128 and 384 tokens on a Bow Pod16 and Pod64, BERT-Base at 128 and 512,
BERT-Large's SQuAD fine-tuning), two of its PopTorch BERT (BERT-Base at 128, SQuAD fine-tuning)
and three of its TensorFlow 1 BERT (BERT-Large at 128 tokens on a Bow Pod16 and Pod64, at 384
on a Pod16): other sequence lengths, micro-batches, a smaller model, another task and four
frameworks. With ``--vit``, the ViT-B/16 row, with ``--resnext`` the ResNeXt-101 row
(``examples/resnext_training.py``) and with ``--efficientnet`` the three G16-EfficientNet-B4
rows (``examples/efficientnet_training.py``), all on the shared parameters. The other families
wait for their examples.

Layouts: one IPU per replica, ``replicas / 2`` instances (PopRun's MLPerf ResNet-50 runs;
16 for the v1.0 Pod64 run, as its logs give),
and the calibration rows' hosts per Pod size (1 for a Pod16, 4 for a Pod64, then 4 per
Pod64); the optimiser of ``examples/resnet50.py`` for every row (Graphcore's v1.0 runs
used SGD with momentum, the v2.0 runs LARS).

Prints one JSON line per row, then a Markdown table with the median and the worst absolute
error, and a last JSON line with those.

Run::

    python benchmarks/validate.py [--bert] [--vit] [--resnext] [--efficientnet]
    python benchmarks/validate.py --rows A9 C8   # only these rows, whatever the flags

References:
    mlcommons/training_results_v1.0 and v2.0, Graphcore ResNet-50 result logs (throughput =
    1,281,167 ImageNet images / median epoch time); Graphcore, "Performance Results"
    (graphcore.ai/performance-results, Bow Pod launch figures).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import calibrate  # noqa: E402 - this folder's fit: one way to simulate a published row

import hardware  # noqa: E402
from popdist_emu import arguments  # noqa: E402


class Row(NamedTuple):
    """One published configuration and its figure."""

    key: str  # its row in benchmarks/published_rows.md
    system: str
    replicas: int
    micro_batch: int
    gradient_accumulation: int
    published: float  # images per second
    source: str
    fitted: bool = False
    instances: int = 0  # PopRun's --num-instances (0: replicas / 2)


def _hosts(replicas: int) -> int:
    return 1 if replicas <= 16 else replicas // 16


ROWS = (
    Row("A1", "pod16", 16, 20, 6, 27_522, "MLPerf Training v1.0, Mk2, SDK 2.1"),
    Row("A2", "pod64", 64, 20, 2, 83_420, "MLPerf Training v1.0, Mk2, SDK 2.1", instances=16),
    Row("A5", "bow-pod16", 16, 22, 10, 43_133, "MLPerf Training v2.0, Bow, SDK 2.5.1"),
    Row("A6", "bow-pod64", 64, 20, 4, 145_952, "MLPerf Training v2.0, Bow, SDK 2.5.1"),
    Row("A7", "bow-pod128", 128, 20, 2, 231_512, "MLPerf Training v2.0, Bow, SDK 2.5.1"),
    Row("A8", "bow-pod256", 256, 20, 2, 425_415, "MLPerf Training v2.0, Bow, SDK 2.5.1"),
    Row("C1", "bow-pod16", 16, 20, 6, 42_029, "Graphcore performance results, Bow launch"),
    Row("C2", "bow-pod64", 64, 20, 2, 145_287, "Graphcore performance results, Bow launch"),
    Row("C3", "bow-pod256", 256, 20, 2, 425_514, "Graphcore performance results, Bow launch"),
)
# The calibration (MLPerf Training v1.1, Mk2, SDK 2.3), for reference: calibrate.py's rows.
ROWS += tuple(
    Row(
        "v1.1",
        system,
        replicas,
        calibrate.MICRO_BATCH,
        ga,
        published,
        "MLPerf Training v1.1 (fitted)",
        True,
    )
    for system, replicas, ga, _, _, published in calibrate.PUBLISHED
)


# BERT-Large rows, each as Graphcore's configuration file for it sets it (mlcommons/
# training_results_v1.0, v1.1 and v2.0, Graphcore/benchmarks/bert/implementations/popart/
# configs/): its placement (encoder_start_ipu with layers_per_ipu, or att_ffn_placement),
# the decoder tied to the embeddings on IPU 0, vocab_length, micro-batch (batch_size, in
# packs of about 2 sequences), gradient accumulation, available_memory_proportion, half
# partials, LAMB with replicated tensor sharding, the optimiser state off chip where
# optimizer_state_offchip says so, LAMB's moments in float32 but the first in float16 where
# lamb_m_dtype says FLOAT16 (v1.1's POD16 and POD128) and both where lamb_accl_dtype does
# (v2.0). Instances as Graphcore launched them: PopRun with 2
# (POD128) and 4 (POD256) instances, a single process below (the v2.0 README: "Pod16 and 64
# runs can be launched directly using bert.py"). Recomputation at every block boundary is
# ours (the configurations leave PopART's recomputation to its defaults).
_COMMON = (
    "--model large --sequence-length 512 --max-predictions 76 --sequences-per-sample 2 "
    "--tied-decoder --enable-half-partials --replicated-tensor-sharding --recompute"
)
_V1_0 = f"{_COMMON} --vocab-size 30400 --micro-batch-size 2"
_V1_1 = f"{_COMMON} --vocab-size 30912 --micro-batch-size 2 --encoder-start-ipu 1"
_V2_0_COMMON = (
    f"{_COMMON} --vocab-size 30912 --micro-batch-size 3 --encoder-start-ipu 1 "
    "--half-optimiser-state"
)
# pod{64,128,256}-closed.json: proportion 1 on every IPU, one layer on IPU 0 after the wrap.
_V2_0 = (
    f"{_V2_0_COMMON} --available-memory-proportion 1 --att-ffn-placement "
    "[[1,[3,3]],[2,[3,3]],[3,[3,3]],[4,[4,3]],[5,[3,4]],[6,[4,3]],[7,[3,4]],[0,[1,1]]]"
)
# pod16-closed.json: with 2 replicas the RTS domain is 2, not 8, so each IPU holds 4x the
# LAMB state; Graphcore ran it at proportion 0.3 with only the last feed-forward half on
# IPU 0. Its FLOAT8 activation_checkpoint_dtype (the checkpoints PopART stashes inside a
# stage, in 8 bits) is not modelled: our recomputation stashes the stage inputs only and
# keeps the checkpoints inside a stage while it recomputes, so the row fits without it.
_V2_0_POD16 = (
    f"{_V2_0_COMMON} --available-memory-proportion 0.3 --att-ffn-placement "
    "[[1,[3,3]],[2,[4,3]],[3,[3,3]],[4,[3,4]],[5,[4,3]],[6,[3,4]],[7,[4,3]],[0,[0,1]]]"
)


def _launch(system: str, replicas: int, ipus: int, instances: int = 1) -> str:
    return (
        f"--system {system} --num-replicas {replicas} --num-instances {instances} "
        f"--ipus-per-replica {ipus}"
    )


class ExampleRow(NamedTuple):
    """One published configuration an example runs: its launch and the example's words."""

    key: str
    published: float  # sequences (BERT) or images per second
    source: str
    launch: str
    words: str
    example: str = "bert.py"
    figure: str = "sequences_per_second"  # the key of the example's JSON line
    model: str = "BERT-Large"  # the table's label

    def value(self, flag: str) -> int:
        """The integer after ``flag`` in the row's words."""
        words = self.words.split()
        return int(words[words.index(flag) + 1])


# The BERT family's calibration (benchmarks/calibrate_bert.py): the Mk2 MLPerf BERT-Large rows
# on one Pod (no GW-Links: the cross-Pod collectives are the shared fit's, checked below).
BERT_CALIBRATION_ROWS = (
    ExampleRow(
        "A3",
        1_419,
        "MLPerf Training v1.0, Mk2, SDK 2.1",
        _launch("pod16", 4, 4),
        f"{_V1_0} --gradient-accumulation 192 --layers-per-ipu 3,7,7,7 --offload-optimiser "
        "--available-memory-proportion 0.2 0.2 0.25 0.25",
    ),
    ExampleRow(
        "A4",
        4_241,
        "MLPerf Training v1.0, Mk2, SDK 2.1",
        _launch("pod64", 8, 8),
        f"{_V1_0} --gradient-accumulation 96 --encoder-start-ipu 1 "
        "--layers-per-ipu 3,3,3,3,4,4,4 --available-memory-proportion 1",
    ),
    ExampleRow(
        "v1.1 POD16",
        1_524,
        "MLPerf Training v1.1, training blocks only",
        _launch("pod16", 4, 4),
        f"{_V1_1} --gradient-accumulation 192 --offload-optimiser --half-first-order-momentum "
        "--available-memory-proportion 0.23 --att-ffn-placement "
        "[[1,[7,6]],[2,[6,7]],[3,[7,6]],[0,[4,5]]]",
    ),
    ExampleRow(
        "v1.1 POD64",
        4_792,
        "MLPerf Training v1.1, training blocks only",
        _launch("pod64", 8, 8),
        f"{_V1_1} --gradient-accumulation 96 "
        "--available-memory-proportion 0.2 0.25 0.25 0.25 0.25 0.25 0.25 0.25 "
        "--att-ffn-placement [[1,[2,2]],[2,[3,3]],[3,[4,3]],[4,[3,4]],[5,[4,3]],[6,[3,4]],"
        "[7,[4,3]],[0,[1,2]]]",
    ),
)

# The checks: v1.1 across two Pods, and the Bow rows (MLPerf Training v2.0), an IPU and a
# software release the fit never saw.
BERT_ROWS = (
    ExampleRow(
        "v1.1 POD128",
        9_028,
        "MLPerf Training v1.1, training blocks only",
        _launch("pod128", 16, 8, 2),
        f"{_V1_1} --gradient-accumulation 96 --half-first-order-momentum "
        "--available-memory-proportion 0.2 0.25 0.25 0.25 0.25 0.25 0.25 0.25 "
        "--att-ffn-placement [[1,[2,2]],[2,[3,3]],[3,[4,3]],[4,[3,4]],[5,[4,3]],[6,[3,4]],"
        "[7,[4,3]],[0,[1,2]]]",
    ),
    ExampleRow(
        "A9",
        2_304,
        "MLPerf Training v2.0, Bow, SDK 2.5.1",
        _launch("bow-pod16", 2, 8),
        f"{_V2_0_POD16} --gradient-accumulation 256",
    ),
    ExampleRow(
        "A10",
        7_411,
        "MLPerf Training v2.0, Bow, SDK 2.5.1",
        _launch("bow-pod64", 8, 8),
        f"{_V2_0} --gradient-accumulation 96",
    ),
    ExampleRow(
        "A11",
        12_676,
        "MLPerf Training v2.0, Bow, SDK 2.5.1",
        _launch("bow-pod128", 16, 8, 2),
        f"{_V2_0} --gradient-accumulation 64",
    ),
    ExampleRow(
        "A12",
        19_071,
        "MLPerf Training v2.0, Bow, SDK 2.5.1",
        _launch("bow-pod256", 32, 8, 4),
        f"{_V2_0} --gradient-accumulation 36",
    ),
    # Graphcore's PaddlePaddle BERT-Large of the same round (training_results_v2.0, Graphcore/
    # benchmarks/bert/implementations/paddlepaddle/: run_mlperf_POD{16,64}.sh and bert.py): the
    # PopART rows' configurations in another framework. bert.py's attn_ipu_index and
    # ff_ipu_index are pod16-closed.json's and pod64-closed.json's att_ffn_placement, its
    # available_memory 0.3 and 1.0 theirs, micro-batch 3 packs, grad_acc_factor 256 and 96 on
    # 2 and 8 local replicas in one process, LAMB with both moments in float16 (accl1_type,
    # accl2_type) sharded on chip by RTS; the Pod16's FLOAT8 checkpoints, as A9's, not modelled.
    ExampleRow(
        "A13",
        2_309,
        "MLPerf Training v2.0, Bow, SDK 2.5.1, PaddlePaddle",
        _launch("bow-pod16", 2, 8),
        f"{_V2_0_POD16} --gradient-accumulation 256",
    ),
    ExampleRow(
        "A14",
        7_463,
        "MLPerf Training v2.0, Bow, SDK 2.5.1, PaddlePaddle",
        _launch("bow-pod64", 8, 8),
        f"{_V2_0} --gradient-accumulation 96",
    ),
)


# Graphcore's performance-results page (Table B of published_rows.md), its TensorFlow 2 BERT
# pre-training rows whose global batch is exactly their configuration file's (graphcore/
# examples, nlp/bert/tensorflow2/configs/pretrain_{large_128_phase1,base_128_phase1,
# base_384_phase2}.json: micro_batch_size x replicas x grad_acc_steps_per_replica = 65,280
# and 16,320): one process of 4 replicas of 4 IPUs; the embeddings (with BERT-Large's first
# three layers) on IPU 0 and the heads wrapping round to it (pipeline_device_mapping
# [0, 1, 2, 3, 0]; Hugging Face's masked-LM decoder is tied to the word embeddings); each
# stage's matmul proportion; the options' defaults (utilities/options.py): half partials,
# a recomputation checkpoint after every layer, the optimiser state off chip, no RTS.
# Unpacked sequences of 128 or 384 tokens and micro-batches of 8 and 32: shapes the BERT fit
# never saw, on Bow. (B5, TensorFlow 2 on a Bow Pod64, published at a global batch of 66,560
# that the snapshot's POD64 configuration, 130,560, does not give, is left out.)
_TF2 = "--vocab-size 30400 --tied-decoder --enable-half-partials --recompute --offload-optimiser"
_TF2_BASE = (
    f"--model base {_TF2} --encoder-start-ipu 1 --layers-per-ipu 4,4,4 "
    "--gradient-accumulation 510 --available-memory-proportion 0.28 0.26 0.28 0.28"
)
_TF2_SOURCE = "Graphcore performance results, Bow, SDK 3.3, TensorFlow 2"
BERT_TF2_ROWS = (
    ExampleRow(
        "B2",
        4_527,
        _TF2_SOURCE,
        _launch("bow-pod16", 4, 4),
        f"--model large {_TF2} --sequence-length 128 --max-predictions 20 "
        "--micro-batch-size 8 --gradient-accumulation 2040 --layers-per-ipu 3,7,7,7 "
        "--available-memory-proportion 0.10 0.19 0.20 0.25",
    ),
    ExampleRow(
        "B14",
        15_173,
        _TF2_SOURCE,
        _launch("bow-pod16", 4, 4),
        f"{_TF2_BASE} --sequence-length 128 --max-predictions 20 --micro-batch-size 32",
        model="BERT-Base",
    ),
    ExampleRow(
        "B17",
        4_387,
        _TF2_SOURCE,
        _launch("bow-pod16", 4, 4),
        f"{_TF2_BASE} --sequence-length 384 --max-predictions 56 --micro-batch-size 8",
        model="BERT-Base",
    ),
)


# The same page's PopART BERT rows on unpacked sequences, as graphcore/examples' PopART BERT
# configurations set them (the folder left the repository after SDK 3.2; our snapshot keeps
# its history): BERT-Large at the Bow launch ("Pre-SDK2.5"; applications/popart/bert/configs/
# mk2/pretrain_large_{128,384}.json of the SDK 2.4 and 2.5 releases, which agree, and the
# SDK 2.4 release's _POD64 files, launched as one process: README_Benchmarks.md), BERT-Base
# at SDK 3.1 (nlp/bert/popart/configs/pretrain_base_{128,512}.json of that release). Each
# global_batch_size is the published one; the gradient accumulation is global_batch_size /
# (micro_batch_size x replication_factor). LAMB with replicated tensor sharding and the
# optimiser state off chip, half partials, vocab_length 30,400, the decoder tied to the
# embeddings on IPU 0. And SQuAD fine-tuning at SDK 3.1 (configs/squad_large_384.json of that
# release): 2 replicas of 8 IPUs, micro-batch 4, GA 32, 4 device iterations a host call,
# layers_per_ipu [2, 3, 3, 3, 3, 3, 3, 4] with the span head on the last IPU, Adam with its
# state sharded by RTS, each IPU's proportion; use_half_optimizer_state stores the first
# moment in float16 (bert_optimizer/optimizer.py sets accl1_type only), and with the second
# in float32 our worst-tile estimate of IPU 7 overflows by 0.75 % as B12's below, so the row
# stores both in float16 (--half-optimiser-state), as B12 does. The
# packed rows wait: their published batch counts packs of 1 to 3 sequences, whose mean is
# not given.
_POPART = (
    "--vocab-size 30400 --tied-decoder --enable-half-partials --replicated-tensor-sharding "
    "--offload-optimiser --recompute"
)
_POPART_LARGE = f"--model large {_POPART} --layers-per-ipu 3,7,7,7"
_POPART_LARGE_128 = (
    f"{_POPART_LARGE} --sequence-length 128 --max-predictions 20 --micro-batch-size 8 "
    "--available-memory-proportion 0.15 0.25 0.25 0.25"
)
_POPART_LARGE_384 = (
    f"{_POPART_LARGE} --sequence-length 384 --max-predictions 56 --micro-batch-size 2 "
    "--available-memory-proportion 0.15 0.4 0.4 0.4"
)
_POPART_BASE = (
    f"--model base {_POPART} --encoder-start-ipu 1 --layers-per-ipu 4,4,4 "
    "--gradient-accumulation 512 --available-memory-proportion 0.28"
)
# SQuAD fine-tuning's layout, PopART's and PopTorch's alike: 2 replicas of 8 IPUs, micro-batch
# 4, gradient accumulation 32, the span head on the last IPU, Adam sharded by RTS.
_SQUAD_LARGE = (
    "--model large --task squad --optimiser adam --half-optimiser-state --enable-half-partials "
    "--replicated-tensor-sharding --recompute --sequence-length 384 --micro-batch-size 4 "
    "--gradient-accumulation 32 --steps 32 --layers-per-ipu 2,3,3,3,3,3,3,4"
)
_LAUNCH_SOURCE = "Graphcore performance results, Bow launch, PopART"
_POPART_SOURCE = "Graphcore performance results, Bow, SDK 3.1, PopART"
BERT_POPART_ROWS = (
    ExampleRow(
        "C10",
        5_179,
        _LAUNCH_SOURCE,
        _launch("bow-pod16", 4, 4),
        f"{_POPART_LARGE_128} --gradient-accumulation 2048",
    ),
    ExampleRow(
        "C12",
        19_353,
        _LAUNCH_SOURCE,
        _launch("bow-pod64", 16, 4),
        f"{_POPART_LARGE_128} --gradient-accumulation 512",
    ),
    ExampleRow(
        "C14",
        1_470,
        _LAUNCH_SOURCE,
        _launch("bow-pod16", 4, 4),
        f"{_POPART_LARGE_384} --gradient-accumulation 2048",
    ),
    ExampleRow(
        "C16",
        5_444,
        _LAUNCH_SOURCE,
        _launch("bow-pod64", 16, 4),
        f"{_POPART_LARGE_384} --gradient-accumulation 512",
    ),
    ExampleRow(
        "B13",
        16_391,
        _POPART_SOURCE,
        _launch("bow-pod16", 4, 4),
        f"{_POPART_BASE} --sequence-length 128 --max-predictions 20 --micro-batch-size 32",
        model="BERT-Base",
    ),
    ExampleRow(
        "B16",
        3_656,
        _POPART_SOURCE,
        _launch("bow-pod16", 4, 4),
        f"{_POPART_BASE} --sequence-length 512 --max-predictions 76 --micro-batch-size 8",
        model="BERT-Base",
    ),
    ExampleRow(
        "B11",
        1_183,
        _POPART_SOURCE,
        _launch("bow-pod16", 2, 8),
        f"{_SQUAD_LARGE} --vocab-size 30400 --device-iterations 4 "
        "--available-memory-proportion 0.1 0.3 0.32 0.34 0.36 0.38 0.4 0.32",
        model="BERT-Large SQuAD",
    ),
)

# The same page's PopTorch rows on unpacked sequences (SDK 3.3). BERT-Base pre-training (B15) as
# graphcore/examples' nlp/bert/pytorch/configs_pretraining.yml ``pretrain_base_128`` sets it, which
# benchmarks.yml's Pod16 benchmark runs without --packed-data: 4 replicas of 4 IPUs, micro-batch 32,
# gradient accumulation 512 (65,536, the published global batch), layers_per_ipu [0, 4, 4, 4] (the
# embeddings alone on IPU 0, the heads back there: Hugging Face's decoder is tied to them),
# matmul_proportion 0.25, vocab_size 30,522, half partials, a recomputation checkpoint every layer,
# LAMB with RTS and the optimiser state off chip. SQuAD fine-tuning (B12) as
# nlp/bert/pytorch/configs_squad.yml ``squad_large_384`` sets it (unchanged from SDK 3.1 to HEAD but
# for white space): 2 replicas of 8 IPUs, micro-batch 4, gradient accumulation 32, 2 device
# iterations, layers_per_ipu [2, 3, 3, 3, 3, 3, 3, 4], each IPU's matmul proportion, vocab_size
# 30,522, half partials, a recomputation checkpoint every layer, AdamW with its state on chip
# sharded by RTS (``replicated_tensor_sharding`` from the ``squad_base_384`` defaults it inherits:
# "relies on replicatedTensorSharding to reduce the optimizer state such that it fits on chip"). Its
# first moment is float16 (``enable_half_first_order_momentum``: ``--half-first-order-momentum``, as
# PopART's B11); with the second in float32 our worst-tile estimate of IPU 7 overflows by 0.75 %
# (643,806 bytes of 638,976) where Graphcore ran it, so the row runs with both moments in float16
# (``--half-optimiser-state``), which changes the memory, not the time: the update is 0.4 % of the
# step.
BERT_POPTORCH_ROWS = (
    ExampleRow(
        "B15",
        15_911,
        "Graphcore performance results, Bow, SDK 3.3, PopTorch",
        _launch("bow-pod16", 4, 4),
        "--model base --vocab-size 30522 --tied-decoder --enable-half-partials "
        "--replicated-tensor-sharding --offload-optimiser --recompute --encoder-start-ipu 1 "
        "--layers-per-ipu 4,4,4 --available-memory-proportion 0.25 --sequence-length 128 "
        "--max-predictions 20 --micro-batch-size 32 --gradient-accumulation 512",
        model="BERT-Base",
    ),
    ExampleRow(
        "B12",
        1_009,
        "Graphcore performance results, Bow, SDK 3.3, PopTorch",
        _launch("bow-pod16", 2, 8),
        f"{_SQUAD_LARGE} --vocab-size 30522 --device-iterations 2 "
        "--available-memory-proportion 0.08 0.25 0.32 0.32 0.36 0.38 0.4 0.32",
        model="BERT-Large SQuAD",
    ),
)


# The same page's TensorFlow 1 BERT-Large rows at the Bow launch, as graphcore/examples'
# TensorFlow 1 BERT configurations of the SDK 2.4 release set them (applications/tensorflow/
# bert/configs/pretrain_large_{128_phase1,384_phase2}{,_POD64}.json; SDK 2.5's files differ
# only by use_qkv_split): replicas x micro_batch_size x gradient_accumulation_count is the
# published global batch (65,600, 66,560 and 16,400); pipeline_stages put the embeddings
# and three layers on IPU 0, seven layers on each of IPUs 1 to 3 and the masked-LM and NSP
# heads back on IPU 0 (device_mapping [0, 1, 2, 3, 0], the decoder sharing the embedding
# table there); LAMB with replicated tensor sharding and variable offloading, half
# partials, recomputation, vocab_size 30,400, each IPU's available_memory_proportion. (C17,
# the Pod64 384-token row, is left out: its published global batch, 16,400, is not its
# file's 16 x 2 x 520 = 16,640.)
_TF1_SOURCE = "Graphcore performance results, Bow launch, TensorFlow 1"
BERT_TF1_ROWS = (
    ExampleRow(
        "C11",
        5_125,
        _TF1_SOURCE,
        _launch("bow-pod16", 4, 4),
        f"{_POPART_LARGE} --sequence-length 128 --max-predictions 20 --micro-batch-size 8 "
        "--gradient-accumulation 2050 --available-memory-proportion 0.15 0.25 0.25 0.25",
    ),
    ExampleRow(
        "C13",
        18_907,
        _TF1_SOURCE,
        _launch("bow-pod64", 16, 4),
        f"{_POPART_LARGE} --sequence-length 128 --max-predictions 20 --micro-batch-size 8 "
        "--gradient-accumulation 520 --available-memory-proportion 0.15 0.23 0.25 0.25",
    ),
    ExampleRow(
        "C15",
        1_420,
        _TF1_SOURCE,
        _launch("bow-pod16", 4, 4),
        f"{_POPART_LARGE} --sequence-length 384 --max-predictions 58 --micro-batch-size 2 "
        "--gradient-accumulation 2050 --available-memory-proportion 0.15 0.4 0.4 0.4",
    ),
)

# ViT-B/16 pre-training, Graphcore's PopTorch ViT on a Bow-POD64 (graphcore/examples,
# vision/vit/pytorch: configs.yml ``b16_in1k_pretrain_lamb`` with benchmarks.yml's
# ``pytorch_vit_lamb_pretrain_gen_pod64``: 16 replicas of 4 IPUs over 8 instances, micro-batch
# 8, gradient accumulation 512, layers_per_ipu 3,3,3,3, matmul_proportion 0.3, LAMB without
# RTS (the benchmark passes ``--enable-rts false``), recomputation checkpoints every layer,
# half partials (args.py's default), 16.16 precision), modelled by ``examples/vit.py``. Its
# extra checkpoints inside layers 1, 4, 7 and 10 (``recompute_mid_layers``) are not modelled.
VIT_ROWS = (
    ExampleRow(
        "C8",
        31_200,
        "Graphcore performance results, Bow, PopTorch",
        _launch("bow-pod64", 16, 4, 8),
        "--model base --micro-batch-size 8 --gradient-accumulation 512 --layers-per-ipu "
        "3,3,3,3 --available-memory-proportion 0.3 --recompute --enable-half-partials",
        "vit.py",
        "samples_per_second",
        model="ViT-B/16",
    ),
)


# ResNeXt-101 32x4d, Graphcore's TensorFlow CNNs on a Bow-POD16 (configs.yml
# ``mk2_resnext101_16ipus``, in mlcommons/training_results_v2.0's copy,
# ``Graphcore/benchmarks/resnet/implementations/tensorflow``: 8 replicas of 2 IPUs,
# micro-batch 6, gradient accumulation 16, the pipeline split after ``stage3/unit4/relu``, the
# grouped schedule, recomputation, half partials, group norm, momentum SGD; PopLibs' default
# memory proportion), modelled by ``examples/resnext_training.py``. Launched as the file's
# benchmarks.yml (``resnext101_pipelined_training_8_replicas_2_shards_real``) launches it: 8
# instances, ``--logs-per-epoch 16``, so train.py runs 1,281,167 // 768 // 16 = 104 steps a
# session call (``--device-iterations 104``).
RESNEXT_ROWS = (
    ExampleRow(
        "C7",
        12_221,
        "Graphcore performance results, Bow launch, TF1",
        _launch("bow-pod16", 8, 2, 8),
        "--model 101 --micro-batch-size 6 --gradient-accumulation 16 --split-after stage3unit4 "
        "--recompute --enable-half-partials --device-iterations 104 --steps 104",
        "resnext_training.py",
        "samples_per_second",
        model="ResNeXt-101",
    ),
)


# G16-EfficientNet-B4, Graphcore's TensorFlow CNNs (configs.yml
# ``mk2_efficientnet_b4_g16_{16,64,256}ipus`` in mlcommons/training_results_v2.0's copy,
# ``Graphcore/benchmarks/resnet/implementations/tensorflow``: replicas of 2 IPUs, micro-batch 3,
# global batch 6,144, the pipeline split at ``block4a``, group dimension 16, expansion 4,
# recomputation, half partials, group norm, ``available_memory_proportion`` 0.4, 16.16, LARS;
# 380 x 380 images, B4's default), modelled by ``examples/efficientnet_training.py``. Instances
# and steps per session call as the poprun lines of graphcore/examples' vision/cnns/tensorflow1/
# benchmarks.yml (SDK 3.0 release, f60a6b3) give them: one instance per replica (8, 32, 128);
# the Pod16 line reads 15 % of ImageNet with ``--logs-per-epoch 16``, one step a call
# (192,175 // 6,144 // 16), the Pod64 and Pod256 lines all of it with ``--logs-per-epoch 2``,
# 1,281,167 // 6,144 // 2 = 104 steps a call.
_EFFICIENTNET = (
    "--model b4 --group-dim 16 --expand-ratio 4 --micro-batch-size 3 --pipeline-splits block4a "
    "--recompute --enable-half-partials --available-memory-proportion 0.4 --optimiser lars"
)
EFFICIENTNET_ROWS = tuple(
    ExampleRow(
        key,
        published,
        "Graphcore performance results, Bow launch, TF1",
        _launch(system, replicas, 2, instances),
        f"{_EFFICIENTNET} --gradient-accumulation {accumulation} "
        f"--device-iterations {iterations} --steps {iterations}",
        "efficientnet_training.py",
        "samples_per_second",
        model="EfficientNet-B4 G16",
    )
    for key, published, system, replicas, instances, accumulation, iterations in (
        ("C4", 8_936, "bow-pod16", 8, 8, 256, 1),
        ("C5", 34_943, "bow-pod64", 32, 32, 64, 104),
        ("C6", 117_641, "bow-pod256", 128, 128, 16, 104),
    )
)


# The example rows by the flag that adds them (--bert, --vit, --resnext, --efficientnet).
FAMILIES = {
    "bert": BERT_CALIBRATION_ROWS
    + BERT_ROWS
    + BERT_TF2_ROWS
    + BERT_POPART_ROWS
    + BERT_POPTORCH_ROWS
    + BERT_TF1_ROWS,
    "vit": VIT_ROWS,
    "resnext": RESNEXT_ROWS,
    "efficientnet": EFFICIENTNET_ROWS,
}
EXAMPLE_ROWS = tuple(row for rows in FAMILIES.values() for row in rows)


def select_rows(keys: list[str] | None, families: list[str]) -> tuple[tuple, tuple]:
    """The ResNet-50 rows and example rows to run: every ResNet-50 row and the ``families``'
    example rows, or, with ``keys``, exactly the rows of those keys (a calibration key such
    as ``v1.1`` names all its rows).

    Raises:
        ValueError: a key that names no row, with the keys there are.
    """
    if keys is None:
        return ROWS, tuple(row for name in families for row in FAMILIES[name])
    known = [row.key for row in ROWS + EXAMPLE_ROWS]
    for key in keys:
        if key not in known:
            raise ValueError(
                f"--rows {key!r} names no row; the rows are {', '.join(dict.fromkeys(known))}"
            )
    return (
        tuple(row for row in ROWS if row.key in keys),
        tuple(row for row in EXAMPLE_ROWS if row.key in keys),
    )


def run_example(row: ExampleRow) -> dict:
    """The final JSON line of an offline run of the row's example under ``poprun-emu``."""
    launch, words = row.launch, row.words
    poprun = shutil.which("poprun-emu", path=str(Path(sys.executable).parent)) or "poprun-emu"
    command = [poprun, "--offline-mode", "yes", "--only-output-from-instance", "0"]
    command += [*launch.split(), str(ROOT / "examples" / row.example)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(
        command + words.split(), capture_output=True, text=True, env=env, timeout=1800
    )
    if out.returncode != 0:
        raise SystemExit(f"validate.py: {' '.join(command)} failed:\n{out.stderr[-2000:]}")
    lines = [line.split(">:", 1)[-1] for line in out.stdout.splitlines()]
    return json.loads(next(line for line in reversed(lines) if line.startswith("{")))


def predict_example(row: ExampleRow) -> float:
    """Simulated throughput of an offline run of the row's example under ``poprun-emu``."""
    return float(run_example(row)[row.figure])


def predict(profile: hardware.StepProfile, row: Row) -> float:
    """Simulated images per second of ``row`` with the calibrated parameters, as
    ``benchmarks/calibrate.py`` predicts its own rows."""
    instances = row.instances or row.replicas // 2
    layout = (row.system, row.replicas, row.gradient_accumulation, instances)
    return calibrate.predict(
        profile, (*layout, _hosts(row.replicas), row.published), hardware.load_parameters()
    )


def _table(results: list[dict]) -> str:
    header = "| row | system | replicas | mb | GA | published per s | predicted per s | error "
    lines = [header + "| source |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['row']} | {r['system']} | {r['replicas']} | {r['micro_batch']} | "
            f"{r['gradient_accumulation']} | {r['published']:,.0f} | {r['predicted']:,.0f} | "
            f"{r['error']:+.1%} | {r['source']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = arguments.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bert", action="store_true", help="BERT rows too (minutes)")
    parser.add_argument("--vit", action="store_true", help="ViT-B/16 rows too (a minute)")
    parser.add_argument("--resnext", action="store_true", help="ResNeXt-101 rows too (30 s)")
    parser.add_argument(
        "--efficientnet", action="store_true", help="EfficientNet-B4 rows too (4 minutes)"
    )
    parser.add_argument(
        "--rows",
        nargs="+",
        metavar="KEY",
        help="only these rows, by their key in the table (e.g. A9 C8), whatever the flags",
    )
    args = parser.parse_args(argv)
    families = [name for name in FAMILIES if getattr(args, name)]
    try:
        resnet_rows, examples = select_rows(args.rows, families)
    except ValueError as error:
        parser.error(str(error))

    profiles: dict[int, hardware.StepProfile] = {}
    started = time.perf_counter()
    results = []
    if resnet_rows:  # its profile compiles ResNet-50's step: seconds
        import resnet50
    for row in resnet_rows:
        if row.micro_batch not in profiles:
            profiles[row.micro_batch] = resnet50.profile(row.micro_batch)
        predicted = predict(profiles[row.micro_batch], row)
        result = {
            "row": row.key,
            "system": row.system,
            "replicas": row.replicas,
            "micro_batch": row.micro_batch,
            "gradient_accumulation": row.gradient_accumulation,
            "published": row.published,
            "predicted": round(predicted, 1),
            "error": round(predicted / row.published - 1.0, 4),
            "fitted": row.fitted,
            "source": row.source,
        }
        results.append(result)
        print(json.dumps(result), flush=True)
    simulated: dict[tuple[str, str], float] = {}
    for row in examples:
        if (row.launch, row.words) not in simulated:
            simulated[row.launch, row.words] = predict_example(row)
        predicted = simulated[row.launch, row.words]
        launch = row.launch.split()
        result = {
            "row": row.key,
            "system": f"{launch[1]} ({row.model})",
            "replicas": int(launch[3]),
            "micro_batch": row.value("--micro-batch-size"),
            "gradient_accumulation": row.value("--gradient-accumulation"),
            "published": row.published,
            "predicted": round(predicted, 1),
            "error": round(predicted / row.published - 1.0, 4),
            "fitted": row in BERT_CALIBRATION_ROWS,
            "source": row.source,
        }
        results.append(result)
        print(json.dumps(result), flush=True)
    checked = [r for r in results if not r["fitted"]]
    print("\nRows no fit used:\n" + _table(checked))
    print("\nThe calibration rows (fitted):\n" + _table([r for r in results if r["fitted"]]))
    summary: dict = {"rows": len(checked)}
    if checked:
        errors = [abs(r["error"]) for r in checked]
        summary["median_abs_error"] = round(statistics.median(errors), 4)
        summary["worst_abs_error"] = round(max(errors), 4)
        summary["worst_row"] = max(checked, key=lambda r: abs(r["error"]))["row"]
        median, worst = summary["median_abs_error"], summary["worst_abs_error"]
        print(f"\nmedian |error| {median:.1%}, worst {worst:.1%} (row {summary['worst_row']})")
    summary["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
