"""A PopTorch program in the pipelining tutorial's style, on the digits shipped with the project.

The structure and calls of Graphcore's PopTorch pipelining tutorial (its network in
``poptorch.BeginBlock`` blocks, a loss wrapper, ``poptorch.Options`` from PopDist,
``poptorch.DataLoader``, a training loop, then an inference pass over the test set), with the
8x8 digits (1,797 images, 10 classes, shipped with scikit-learn) in place of the MNIST
download. Run it under the launcher, one IPU or the tutorial's four:

    poprun-emu --num-replicas 1 --ipus-per-replica 4 examples/poptorch_tutorial.py
    poprun-emu --num-replicas 4 --num-instances 2 examples/poptorch_tutorial.py

It prints one JSON line: the loss of every optimiser step (one per device iteration, the mean
over every replica's micro-batches, gathered from the instances' own replicas), the
test accuracy, and the wall seconds per step after the first call (which compiles).
``--reference N`` trains the same network in plain PyTorch on the CPU instead (same initial
weights, data order and optimiser, N replicas' worth of samples per step).

References:
    Graphcore tutorials, "PopTorch pipelining" (the network and program structure; our own
    code written in its style); scikit-learn, ``sklearn.datasets.load_digits``.
"""

from __future__ import annotations

import json
import time
from typing import NamedTuple

import numpy as np
import popdist
import popdist.poptorch
import poptorch
import torch

from popdist_emu import arguments, load_digits_split

BATCH, ACCUMULATION, ITERATIONS = 1, 8, 2  # accumulation >= 2 x 4 - 1 pipeline stages


def make_dataset(train: bool = True) -> torch.utils.data.TensorDataset:
    """The digits' training (1,438) or test (359) split as ``[n, 1, 8, 8]`` images and labels."""
    split = load_digits_split()
    images = split.train_images if train else split.test_images
    labels = split.train_labels if train else split.test_labels
    return torch.utils.data.TensorDataset(
        torch.from_numpy(images.transpose(0, 3, 1, 2).copy()), torch.from_numpy(labels).long()
    )


class ConvLayer(torch.nn.Module):
    """Conv 3x3, max-pool 2, ReLU (the tutorial's ConvLayer, smaller)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.relu = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.pool(self.conv(x)))


class Network(torch.nn.Module):
    """Two ConvLayers, Linear+ReLU, Linear, log-softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.layer1 = ConvLayer(1, 16)
        self.layer2 = ConvLayer(16, 32)
        self.layer3 = torch.nn.Linear(32 * 2 * 2, 64)
        self.layer3_act = torch.nn.ReLU()
        self.layer4 = torch.nn.Linear(64, 10)
        self.softmax = torch.nn.LogSoftmax(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(x))
        x = self.layer3_act(self.layer3(x.flatten(1)))
        return self.softmax(self.layer4(x))


def annotate(model: Network, ipus: int) -> None:
    """The tutorial's blocks, block k on IPU k % ipus (the tutorial's layout for 4 IPUs)."""
    model.layer1 = poptorch.BeginBlock(model.layer1, "B1", ipu_id=0)
    model.layer2 = poptorch.BeginBlock(model.layer2, "B2", ipu_id=1 % ipus)
    model.layer3 = poptorch.BeginBlock(model.layer3, "B3", ipu_id=2 % ipus)
    model.layer4 = poptorch.BeginBlock(model.layer4, "B4", ipu_id=3 % ipus)


class TrainingModelWithLoss(torch.nn.Module):
    """The tutorial's loss wrapper: returns ``(output, loss)``."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.loss = torch.nn.NLLLoss()

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        output = self.model(x)
        return output, self.loss(output, labels)


class Run(NamedTuple):
    """What a training run gives: a loss per optimiser step, the final parameters, the test
    accuracy, and the wall seconds per step after the first call (which compiles)."""

    losses: list[float]
    params: dict[str, np.ndarray]
    accuracy: float
    seconds_per_step: float


def _steady(start: float, steps: int) -> float:
    """Seconds per step since ``start`` (the end of the first call) over ``steps`` steps."""
    return (time.perf_counter() - start) / steps if steps > 0 else float("nan")


def reference(steps: int, replicas: int, lr: float) -> Run:
    """The same training in plain PyTorch: one step per device iteration's samples."""
    torch.manual_seed(0)
    model = TrainingModelWithLoss(Network())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    images, labels = make_dataset().tensors
    per_step = BATCH * ACCUMULATION * replicas
    per_epoch = len(labels) // per_step  # the last incomplete batch dropped, as PopTorch does
    losses = []
    clock = 0.0
    for step in range(steps):
        start = (step % per_epoch) * per_step
        x, y = (t[start : start + per_step] for t in (images, labels))
        optimizer.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
        if step == 0:
            clock = time.perf_counter()
    params = {k: v.detach().numpy() for k, v in model.named_parameters()}
    return Run(losses, params, float("nan"), _steady(clock, steps - 1))


def step_losses(loss: torch.Tensor) -> list[float]:
    """Each optimiser step's loss over all replicas' micro-batches. PopTorch returns this
    instance's replicas' losses, one per micro-batch (``OutputMode.All``: ``[iterations x
    accumulation x local replicas]``); the instances' sums are added up over MPI, in float64
    (exact for these float32 values, so any layout of the replicas gives the same bits)."""
    sums = loss.double().reshape(ITERATIONS, -1).sum(1).numpy()
    if popdist.getNumInstances() > 1:
        from mpi4py import MPI  # initialises MPI: only under the launcher's instances

        total = np.empty_like(sums)
        MPI.COMM_WORLD.Allreduce(sums, total, op=MPI.SUM)
        sums = total
    return (sums / (ACCUMULATION * popdist.getNumTotalReplicas())).tolist()


def train(epochs: int, steps: int, lr: float, strategy: str = "") -> Run:
    """The PopTorch program: ``epochs`` over the data (at most ``steps`` optimiser steps when
    ``steps`` is not 0), then the test accuracy."""
    torch.manual_seed(0)
    model = TrainingModelWithLoss(Network())
    ipus = popdist.getNumIpusPerReplica()
    annotate(model.model, ipus)
    opts = popdist.poptorch.Options()
    if strategy and ipus > 1:
        cls = poptorch.PipelinedExecution if strategy == "pipelined" else poptorch.ShardedExecution
        opts.setExecutionStrategy(cls("B1", "B2", "B3", "B4"))
    opts.deviceIterations(ITERATIONS)
    opts.Training.gradientAccumulation(ACCUMULATION)
    opts.outputMode(poptorch.OutputMode.All)
    optimizer = poptorch.optim.AdamW(model.parameters(), lr=lr, loss_scaling=1.0)
    loader = poptorch.DataLoader(opts, make_dataset(), batch_size=BATCH, shuffle=False)
    training = poptorch.trainingModel(model, opts, optimizer)
    losses: list[float] = []
    clock, first = 0.0, 0
    for _ in range(epochs):
        for x, y in loader:
            _, loss = training(x, y)
            losses.extend(step_losses(loss))
            if not first:
                clock, first = time.perf_counter(), len(losses)
            if steps and len(losses) >= steps:
                break
        if steps and len(losses) >= steps:
            break
    seconds_per_step = _steady(clock, len(losses) - first)
    training.detachFromDevice()
    inference = poptorch.inferenceModel(model.model, poptorch.Options())
    images, labels = make_dataset(train=False).tensors
    # The combined batch is split over the local replicas: pad it to a multiple of them.
    pad = -len(images) % popdist.getNumLocalReplicas()
    padded = torch.cat([images, images[:pad]])
    accuracy = float((inference(padded)[: len(images)].argmax(1) == labels).float().mean())
    params = {k: v.detach().numpy() for k, v in model.named_parameters()}
    return Run(losses[:steps] if steps else losses, params, accuracy, seconds_per_step)


def main() -> None:
    parser = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=arguments.positive_int, default=2, help="(2)")
    parser.add_argument(
        "--steps", type=arguments.int_at_least(0), default=0, help="at most this many (0: all)"
    )
    parser.add_argument("--lr", type=arguments.positive_float, default=0.01, help="(0.01)")
    parser.add_argument("--save", type=arguments.output_file, help="final parameters (.npz)")
    parser.add_argument(
        "--strategy",
        choices=("pipelined", "sharded"),
        default="",
        help="run the blocks on several IPUs this way (--ipus-per-replica 2 or 4)",
    )
    parser.add_argument(
        "--reference",
        type=arguments.int_at_least(0),
        default=0,
        help="train in plain PyTorch instead, with N replicas' samples per step",
    )
    args = parser.parse_args()
    if args.reference:
        per_step = BATCH * ACCUMULATION * args.reference
        steps = args.steps or args.epochs * (len(make_dataset()) // per_step)
        run = reference(steps, args.reference, args.lr)
    else:
        run = train(args.epochs, args.steps, args.lr, args.strategy)
    if args.save and popdist.getInstanceIndex() == 0:
        np.savez(args.save, **run.params)
    if popdist.getInstanceIndex() == 0:
        line = {"losses": run.losses, "accuracy": run.accuracy}
        print(json.dumps(line | {"seconds_per_step": run.seconds_per_step}))


if __name__ == "__main__":
    main()
