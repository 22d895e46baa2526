"""A PopTorch program in the pipelining tutorial's style, on a small locally made dataset.

Run as ``poprun-emu ... tutorial_program.py --steps N --save PATH`` (or plainly): its network,
a loss wrapper, ``poptorch.Options`` from PopDist, ``poptorch.DataLoader`` and the training
loop, then an inference pass. ``--reference`` trains the same network in plain PyTorch on
the CPU instead, same initial weights, data order and optimiser.

References:
    Graphcore tutorials, "PopTorch pipelining" (the network and program structure; our own
    code written in its style).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import popdist
import popdist.poptorch
import poptorch
import torch

BATCH, ACCUMULATION, ITERATIONS = 1, 8, 2  # accumulation >= 2 x 4 - 1 pipeline stages


def make_dataset(n: int = 512) -> torch.utils.data.TensorDataset:
    """8x8 one-channel images whose label is the brightest of 4 bands of two rows (learnable)."""
    generator = torch.Generator().manual_seed(1234)
    images = torch.rand(n, 1, 8, 8, generator=generator)
    labels = images.reshape(n, 4, 16).sum(-1).argmax(-1)
    return torch.utils.data.TensorDataset(images, labels)


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
        self.layer1 = ConvLayer(1, 4)
        self.layer2 = ConvLayer(4, 8)
        self.layer3 = torch.nn.Linear(8 * 2 * 2, 32)
        self.layer3_act = torch.nn.ReLU()
        self.layer4 = torch.nn.Linear(32, 4)
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


def reference(steps: int, replicas: int, lr: float) -> tuple[list[float], dict[str, np.ndarray]]:
    """The same training in plain PyTorch: one step per device iteration's samples."""
    torch.manual_seed(0)
    model = TrainingModelWithLoss(Network())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    images, labels = make_dataset().tensors
    per_step = BATCH * ACCUMULATION * replicas
    losses = []
    for step in range(steps):
        x, y = (t[step * per_step : (step + 1) * per_step] for t in (images, labels))
        optimizer.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses, {k: v.detach().numpy() for k, v in model.named_parameters()}


def train(
    steps: int, lr: float, strategy: str = ""
) -> tuple[list[float], dict[str, np.ndarray], float]:
    """The PopTorch program: ``steps`` optimiser steps, then the test accuracy."""
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
    for x, y in loader:
        _, loss = training(x, y)
        losses.extend(loss.tolist())
        if len(losses) >= steps:
            break
    training.detachFromDevice()
    inference = poptorch.inferenceModel(model.model, poptorch.Options())
    images, labels = make_dataset().tensors
    accuracy = float((inference(images).argmax(1) == labels).float().mean())
    return losses[:steps], {k: v.detach().numpy() for k, v in model.named_parameters()}, accuracy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--save")
    parser.add_argument("--strategy", default="", help="pipelined|sharded (several IPUs)")
    parser.add_argument("--reference", type=int, default=0, help="plain PyTorch, N replicas")
    args = parser.parse_args()
    if args.reference:
        losses, params = reference(args.steps, args.reference, args.lr)
        accuracy = float("nan")
    else:
        losses, params, accuracy = train(args.steps, args.lr, args.strategy)
    if args.save and popdist.getInstanceIndex() == 0:
        np.savez(args.save, **params)
    if popdist.getInstanceIndex() == 0:
        print(json.dumps({"losses": losses, "accuracy": accuracy}))


if __name__ == "__main__":
    main()
