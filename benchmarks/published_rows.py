"""The published configurations ``benchmarks/validate.py`` predicts, as data.

``Row``: a ResNet-50 configuration, simulated from ``examples/resnet50.py``'s step profile;
``ExampleRow``: a configuration an example runs offline under ``poprun-emu``, as PopRun's
options and the example's words. This module holds the ResNet-50 rows and those of ViT,
ResNeXt and EfficientNet; ``bert_rows.py`` the BERT rows. ``benchmarks/published_rows.md``
lists every row with its source and how MLPerf throughputs are derived from the logs.
"""

from __future__ import annotations

from typing import NamedTuple


class Row(NamedTuple):
    """One published configuration and its figure."""

    key: str  # its row in benchmarks/published_rows.md
    system: str
    replicas: int
    micro_batch: int
    gradient_accumulation: int
    published: float  # images per second
    source: str
    instances: int = 0  # PopRun's --num-instances (0: replicas / 2)


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
# MLPerf Training v1.1, Mk2, SDK 2.3 (mlcommons/training_results_v1.1, Graphcore ResNet-50 logs;
# instances and hosts as its launch lines give them): the shared fit's rows in the declared
# calibration set (benchmarks/calibration_set.json).
ROWS += tuple(
    Row(f"v1.1 RN50 {system.upper()}", system, replicas, 20, ga, published, "MLPerf Training v1.1")
    for system, replicas, ga, published in (
        ("pod16", 16, 10, 29_500),
        ("pod64", 64, 3, 108_000),
        ("pod128", 128, 2, 178_000),
        ("pod256", 256, 2, 326_000),
    )
)


def launch(system: str, replicas: int, ipus: int, instances: int = 1) -> str:
    """PopRun's options for ``replicas`` of ``ipus`` IPUs on ``system``, over ``instances``."""
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
        launch("bow-pod64", 16, 4, 8),
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
        launch("bow-pod16", 8, 2, 8),
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
        launch(system, replicas, 2, instances),
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
