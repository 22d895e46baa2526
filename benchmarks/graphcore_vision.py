"""Graphcore's vision applications for ``graphcore_programs.py``: ResNet-50, EfficientNet, ViT.

Each runs unchanged from the user's checkout of graphcore/examples; only command-line
arguments are chosen. Functionally: a small configuration on the program's own generated
data (``--data generated``, ``--dataset generated``), float32 (``--precision 32.32``: this
machine computes the numbers, and the program seeds), on 1 and 2 host instances with the
same replicas, so the losses should be the same on either layout (the programs size their
generated data set by their local replicas, so ``--iterations`` is multiplied by the
instances to keep the global data set). Offline: the configuration
of one of Graphcore's published rows, from the application's ``configs.yml`` and
``benchmarks.yml``, on generated data (the rows read ImageNet; offline runs no step):

- ResNet-50: ``benchmarks.yml``'s ``pytorch_resnet50_train_real_pod16`` (``--config
  resnet50``: 16 replicas over 8 instances, micro-batch 18, accumulation 57, 16.16, SGD),
  with 2 data-loader workers instead of the row's 14 (generated data needs none; 14 forked
  workers beside the compile ran this machine out of memory);
- EfficientNet-B4: ``configs.yml``'s ``efficientnet-b4-g16-gn-pod16`` (8 replicas of 2 IPUs,
  micro-batch 4, accumulation 64, device iterations 4, TensorFlow's RMSprop, the optimiser
  state sharded over each instance's replicas), on two instances as
  ``efficientnet_b4_pod16.sh`` and ``benchmarks.yml`` have it, with 2 data-loader workers
  instead of 16 (each holds the instance's combined batch of generated images: more ran this
  machine out of memory), on a Bow-POD16 at the global batch of the published B4 row C4
  (``benchmarks/published_rows.py``: 6,144 samples, one step a call; Graphcore's TensorFlow 1
  program of the same model on the same system), as micro-batch 4 (the program refuses its
  mixup with cutmix below 4) and accumulation 192;
- ViT-B/16 pre-training: ``benchmarks.yml``'s ``pytorch_vit_lamb_pretrain_gen_pod64``
  (``--config b16_in1k_pretrain_lamb``: 16 replicas of 4 IPUs over 8 instances,
  micro-batch 8, accumulation 512, LAMB without RTS) on a Bow-POD64, the row C8.

The applications' ``requirements.txt`` pins packages for Python 3.6 to 3.10; the docs page
``docs/graphcore-applications.md`` says which were installed instead on 3.11.

References:
    graphcore/examples at 3cc8f81f: vision/cnns/pytorch (train/train.py, train/configs.yml,
    train/benchmarks.yml, train/efficientnet_b4_pod16.sh) and vision/vit/pytorch
    (pretrain.py, configs.yml, benchmarks.yml).
"""

from __future__ import annotations

import math
from typing import Any

# Functional runs: 2 replicas (1 or 2 instances), 3 short epochs of generated images.
_RESNET50 = (
    "--data generated --model resnet50 --micro-batch-size 1 --epoch 3 --iterations 4 "
    "--validation-mode none --precision 32.32 --lr 0.05 --seed 1"
)
_EFFICIENTNET = (
    "--data generated --model efficientnet-b0 --norm-type group --norm-num-groups 4 "
    "--efficientnet-group-dim 16 --efficientnet-expand-ratio 4 --optimizer rmsprop_tf "
    "--micro-batch-size 1 --epoch 3 --iterations 4 --validation-mode none --precision 32.32 "
    "--lr 0.01 --seed 1"
)
# A 4-layer ViT of width 64 over 4 IPUs (the application places its head on IPU 3), RTS off
# (setOptimizer then keeps one learning rate per group), mixup on as the configuration has.
_VIT = (
    "--config b16_in1k_pretrain --dataset generated --byteio true --iterations 4 --epochs 2 "
    "--micro-batch-size 2 --gradient-accumulation 8 --layers-per-ipu 1 1 1 1 --hidden-size 64 "
    "--num-hidden-layers 4 --num-attention-heads 2 --mlp-dim 128 --representation-size 64 "
    "--precision 32.32 --dataloader-workers 1 --checkpoint-output-dir '' --warmup-steps 1 "
    "--enable-rts false"
)


def _words(text: str) -> tuple[str, ...]:
    return tuple("" if w == "''" else w for w in text.split())


# Each program's fields of ``graphcore_programs.GraphcoreProgram``.
VISION_PROGRAMS: dict[str, dict[str, Any]] = {
    "resnet50": {
        "path": "vision/cnns/pytorch/train/train.py",
        "dataset": None,
        "poprun": ("--num-replicas", "2"),
        "args": _words(_RESNET50),
        "instances": (1, 2),
        "offline_poprun": ("--num-replicas", "16", "--num-instances", "8"),
        "offline_args": _words(
            "--config resnet50 --data generated --epoch 2 --validation-mode none "
            "--dataloader-worker 2 --dataloader-rebatch-size 256"
        ),
        "loss": r"\] loss: *(\d*\.\d*)",
        "per_instance": ("--iterations",),
    },
    "efficientnet": {
        "path": "vision/cnns/pytorch/train/train.py",
        "dataset": None,
        "poprun": ("--num-replicas", "2"),
        "args": _words(_EFFICIENTNET),
        "instances": (1, 2),
        "offline_poprun": (
            "--num-replicas",
            "8",
            "--num-instances",
            "2",
            "--ipus-per-replica",
            "2",
            "--system",
            "bow-pod16",
        ),
        # The row C4's global batch of 6,144 and one step a call: its micro-batch 3 x 256
        # as the configuration's micro-batch 4 x 192 (the program refuses mixup with cutmix
        # below micro-batch 4); the configuration's own accumulation is 64, 4 steps a call.
        "offline_args": _words(
            "--config efficientnet-b4-g16-gn-pod16 --data generated --epoch 1 "
            "--validation-mode none --dataloader-worker 2 --gradient-accumulation 192 "
            "--device-iterations 1"
        ),
        "loss": r"\] loss: *(\d*\.\d*)",
        "per_instance": ("--iterations",),
        "published": "C4",
    },
    "vit": {
        "path": "vision/vit/pytorch/pretrain.py",
        "dataset": None,
        "poprun": ("--num-replicas", "2", "--ipus-per-replica", "4"),
        "args": _words(_VIT),
        "copy": ("configs.yml",),
        "instances": (1, 2),
        "offline_poprun": (
            "--num-replicas",
            "16",
            "--num-instances",
            "8",
            "--ipus-per-replica",
            "4",
            "--system",
            "bow-pod64",
        ),
        "offline_args": _words(
            "--config b16_in1k_pretrain_lamb --dataset generated --byteio true --iterations 100 "
            "--gradient-accumulation 512 --epochs 1 --dataloader-workers 32 --enable-rts false"
        ),
        "loss": r"Step: \d+/\d+ Lr: \S+ loss: *(\d*\.\d*)",
        "per_instance": ("--iterations",),
        "published": "C8",
        # pretrain.py seeds NumPy and PopTorch (ipu_options.py) but never torch.manual_seed:
        # its initial weights and generated images are other draws in every process.
        "uncompared": "pretrain.py never calls torch.manual_seed (weights and generated images "
        "are other draws in every process)",
    },
}


def same_losses(first: dict, second: dict, rtol: float = 1e-4) -> bool | None:
    """Whether two functional runs printed the same losses (None: either printed none)."""
    a, b = first.get("losses") or [], second.get("losses") or []
    if not a or not b:
        return None
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=rtol) for x, y in zip(a, b, strict=True)
    )
