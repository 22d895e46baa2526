"""A small CNN at batch 32 as a PopTorch program: the second model of ``poptorch_speed.py``.

Three 3x3 convolutions (3 -> 16 -> 32 -> 64 channels, each with ReLU and 2x2 max-pooling)
on 32x32 RGB images, then a linear classifier over 10 classes, trained with SGD (momentum
0.9) on a fixed synthetic data set (seeded, nothing downloaded). The PopTorch run takes
micro-batches of 32 with 4 device iterations a call; ``--reference`` trains the same network
with the same initial weights and batches in plain PyTorch, one step per 32 samples. The
last line is one JSON object with the wall seconds per step after the first call (which
compiles) and the losses.

Usage::

    poprun-emu --num-replicas 1 benchmarks/poptorch_cnn.py [--steps 24]
    python benchmarks/poptorch_cnn.py --reference [--steps 24]

References:
    PopTorch User Guide, "Efficient data batching" (device iterations); PyTorch tutorial
    "Training a classifier" (a CNN of this shape on CIFAR-10's 32x32 images).
"""

from __future__ import annotations

import argparse
import json
import time

import popdist.poptorch
import poptorch
import torch

BATCH, ITERATIONS = 32, 4


class SmallCNN(torch.nn.Module):
    """Three conv-ReLU-pool layers and a linear classifier; returns ``(logits, loss)``."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = []
        for cin, cout in ((3, 16), (16, 32), (32, 64)):
            layers += [
                torch.nn.Conv2d(cin, cout, 3, padding=1),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
            ]
        self.features = torch.nn.Sequential(*layers)
        self.classifier = torch.nn.Linear(64 * 4 * 4, 10)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.classifier(self.features(x).flatten(1))
        return logits, self.loss(logits, y)


def data(steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps x 32`` seeded random images and labels."""
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(steps * BATCH, 3, 32, 32, generator=gen)
    return images, torch.randint(0, 10, (steps * BATCH,), generator=gen)


def reference(steps: int) -> tuple[list[float], float]:
    """Plain PyTorch eager: the losses and the seconds per step after the first."""
    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, labels = data(steps)
    losses, clock = [], 0.0
    for step in range(steps):
        batch = slice(step * BATCH, (step + 1) * BATCH)
        optimizer.zero_grad()
        _, loss = model(images[batch], labels[batch])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step == 0:
            clock = time.perf_counter()
    return losses, (time.perf_counter() - clock) / (steps - 1)


def emulated(steps: int) -> tuple[list[float], float]:
    """The PopTorch program: the losses and the seconds per step after the first call."""
    torch.manual_seed(0)
    model = SmallCNN()
    opts = popdist.poptorch.Options()
    opts.deviceIterations(ITERATIONS)
    opts.outputMode(poptorch.OutputMode.All)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    training = poptorch.trainingModel(model, opts, optimizer)
    images, labels = data(steps)
    per_call = BATCH * ITERATIONS
    losses: list[float] = []
    clock = 0.0
    for call in range(steps // ITERATIONS):
        batch = slice(call * per_call, (call + 1) * per_call)
        _, loss = training(images[batch], labels[batch])
        losses += loss.reshape(-1).tolist()
        if call == 0:
            clock = time.perf_counter()
    seconds = (time.perf_counter() - clock) / (len(losses) - ITERATIONS)
    training.detachFromDevice()  # the trained weights reach the module (PopTorch's copy)
    return losses, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=24, help="optimiser steps (24)")
    parser.add_argument("--reference", action="store_true", help="plain PyTorch eager")
    args = parser.parse_args()
    if args.steps < 2 * ITERATIONS or args.steps % ITERATIONS:
        parser.error(f"--steps {args.steps}: pass a multiple of {ITERATIONS}, at least 8.")
    losses, seconds = reference(args.steps) if args.reference else emulated(args.steps)
    print(json.dumps({"losses": losses, "seconds_per_step": seconds}))


if __name__ == "__main__":
    main()
