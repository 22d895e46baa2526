"""The BERT rows ``benchmarks/validate.py --bert`` predicts and ``benchmarks/calibrate_bert.py``
fits, each an offline run of ``examples/bert.py`` as Graphcore's configuration file for the
row sets it (``benchmarks/published_rows.md`` gives the sources)."""

from __future__ import annotations

from published_rows import ExampleRow, launch

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


# The BERT family's calibration (benchmarks/calibrate_bert.py): the Mk2 MLPerf BERT-Large rows
# on one Pod (no GW-Links: the cross-Pod collectives are the shared fit's, checked below).
BERT_CALIBRATION_ROWS = (
    ExampleRow(
        "A3",
        1_419,
        "MLPerf Training v1.0, Mk2, SDK 2.1",
        launch("pod16", 4, 4),
        f"{_V1_0} --gradient-accumulation 192 --layers-per-ipu 3,7,7,7 --offload-optimiser "
        "--available-memory-proportion 0.2 0.2 0.25 0.25",
    ),
    ExampleRow(
        "A4",
        4_241,
        "MLPerf Training v1.0, Mk2, SDK 2.1",
        launch("pod64", 8, 8),
        f"{_V1_0} --gradient-accumulation 96 --encoder-start-ipu 1 "
        "--layers-per-ipu 3,3,3,3,4,4,4 --available-memory-proportion 1",
    ),
    ExampleRow(
        "v1.1 POD16",
        1_524,
        "MLPerf Training v1.1, training blocks only",
        launch("pod16", 4, 4),
        f"{_V1_1} --gradient-accumulation 192 --offload-optimiser --half-first-order-momentum "
        "--available-memory-proportion 0.23 --att-ffn-placement "
        "[[1,[7,6]],[2,[6,7]],[3,[7,6]],[0,[4,5]]]",
    ),
    ExampleRow(
        "v1.1 POD64",
        4_792,
        "MLPerf Training v1.1, training blocks only",
        launch("pod64", 8, 8),
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
        launch("pod128", 16, 8, 2),
        f"{_V1_1} --gradient-accumulation 96 --half-first-order-momentum "
        "--available-memory-proportion 0.2 0.25 0.25 0.25 0.25 0.25 0.25 0.25 "
        "--att-ffn-placement [[1,[2,2]],[2,[3,3]],[3,[4,3]],[4,[3,4]],[5,[4,3]],[6,[3,4]],"
        "[7,[4,3]],[0,[1,2]]]",
    ),
    ExampleRow(
        "A9",
        2_304,
        "MLPerf Training v2.0, Bow, SDK 2.5.1",
        launch("bow-pod16", 2, 8),
        f"{_V2_0_POD16} --gradient-accumulation 256",
    ),
    ExampleRow(
        "A10",
        7_411,
        "MLPerf Training v2.0, Bow, SDK 2.5.1",
        launch("bow-pod64", 8, 8),
        f"{_V2_0} --gradient-accumulation 96",
    ),
    ExampleRow(
        "A11",
        12_676,
        "MLPerf Training v2.0, Bow, SDK 2.5.1",
        launch("bow-pod128", 16, 8, 2),
        f"{_V2_0} --gradient-accumulation 64",
    ),
    ExampleRow(
        "A12",
        19_071,
        "MLPerf Training v2.0, Bow, SDK 2.5.1",
        launch("bow-pod256", 32, 8, 4),
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
        launch("bow-pod16", 2, 8),
        f"{_V2_0_POD16} --gradient-accumulation 256",
    ),
    ExampleRow(
        "A14",
        7_463,
        "MLPerf Training v2.0, Bow, SDK 2.5.1, PaddlePaddle",
        launch("bow-pod64", 8, 8),
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
        launch("bow-pod16", 4, 4),
        f"--model large {_TF2} --sequence-length 128 --max-predictions 20 "
        "--micro-batch-size 8 --gradient-accumulation 2040 --layers-per-ipu 3,7,7,7 "
        "--available-memory-proportion 0.10 0.19 0.20 0.25",
    ),
    ExampleRow(
        "B14",
        15_173,
        _TF2_SOURCE,
        launch("bow-pod16", 4, 4),
        f"{_TF2_BASE} --sequence-length 128 --max-predictions 20 --micro-batch-size 32",
        model="BERT-Base",
    ),
    ExampleRow(
        "B17",
        4_387,
        _TF2_SOURCE,
        launch("bow-pod16", 4, 4),
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
        launch("bow-pod16", 4, 4),
        f"{_POPART_LARGE_128} --gradient-accumulation 2048",
    ),
    ExampleRow(
        "C12",
        19_353,
        _LAUNCH_SOURCE,
        launch("bow-pod64", 16, 4),
        f"{_POPART_LARGE_128} --gradient-accumulation 512",
    ),
    ExampleRow(
        "C14",
        1_470,
        _LAUNCH_SOURCE,
        launch("bow-pod16", 4, 4),
        f"{_POPART_LARGE_384} --gradient-accumulation 2048",
    ),
    ExampleRow(
        "C16",
        5_444,
        _LAUNCH_SOURCE,
        launch("bow-pod64", 16, 4),
        f"{_POPART_LARGE_384} --gradient-accumulation 512",
    ),
    ExampleRow(
        "B13",
        16_391,
        _POPART_SOURCE,
        launch("bow-pod16", 4, 4),
        f"{_POPART_BASE} --sequence-length 128 --max-predictions 20 --micro-batch-size 32",
        model="BERT-Base",
    ),
    ExampleRow(
        "B16",
        3_656,
        _POPART_SOURCE,
        launch("bow-pod16", 4, 4),
        f"{_POPART_BASE} --sequence-length 512 --max-predictions 76 --micro-batch-size 8",
        model="BERT-Base",
    ),
    ExampleRow(
        "B11",
        1_183,
        _POPART_SOURCE,
        launch("bow-pod16", 2, 8),
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
        launch("bow-pod16", 4, 4),
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
        launch("bow-pod16", 2, 8),
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
        launch("bow-pod16", 4, 4),
        f"{_POPART_LARGE} --sequence-length 128 --max-predictions 20 --micro-batch-size 8 "
        "--gradient-accumulation 2050 --available-memory-proportion 0.15 0.25 0.25 0.25",
    ),
    ExampleRow(
        "C13",
        18_907,
        _TF1_SOURCE,
        launch("bow-pod64", 16, 4),
        f"{_POPART_LARGE} --sequence-length 128 --max-predictions 20 --micro-batch-size 8 "
        "--gradient-accumulation 520 --available-memory-proportion 0.15 0.23 0.25 0.25",
    ),
    ExampleRow(
        "C15",
        1_420,
        _TF1_SOURCE,
        launch("bow-pod16", 4, 4),
        f"{_POPART_LARGE} --sequence-length 384 --max-predictions 58 --micro-batch-size 2 "
        "--gradient-accumulation 2050 --available-memory-proportion 0.15 0.4 0.4 0.4",
    ),
)
