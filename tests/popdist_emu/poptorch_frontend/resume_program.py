"""A PopTorch program that trains, checkpoints with ``torch.save`` and resumes: the resume
test runs it in a new Python process and compares with an uninterrupted run in its own.

``python resume_program.py CHECKPOINT START STEPS OUT`` loads each optimiser's model and
optimiser state dicts from CHECKPOINT, trains STEPS more steps from step START and saves
both state dicts to OUT; :func:`train` is the same training, for the test's own process.
``poprun-emu ... resume_program.py --sharded OUT`` trains AdamW with replicated tensor
sharding on the launcher's replicas (:func:`sharded_run`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

import popdist_emu.poptorch as poptorch

OPTIMISERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda p: poptorch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "adamw": lambda p: poptorch.optim.AdamW(p, lr=0.05),
    "rmsprop": lambda p: poptorch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
    "lamb": lambda p: poptorch.optim.LAMB(p, lr=0.05),
}


class Loss(torch.nn.Module):
    """A two-layer classifier returning its cross-entropy."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(x), y)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The combined batch of ``step`` (two replicas of eight samples), a function of it."""
    generator = torch.Generator().manual_seed(step)
    return torch.randn(16, 4, generator=generator), torch.randint(0, 3, (16,), generator=generator)


def train(name: str, start: int, steps: int, saved: dict[str, Any] | None = None) -> dict:
    """``steps`` training calls from step ``start`` on two replicas, from ``saved`` state
    dicts if given; the model's and optimiser's state dicts after them."""
    model = Loss()
    optimizer = OPTIMISERS[name](model.parameters())
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
    training = poptorch.trainingModel(model, poptorch.Options().replicationFactor(2), optimizer)
    for step in range(start, start + steps):
        training(*batch(step))
    training.detachFromDevice()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def sharded_run(out: str) -> None:
    """Under ``poprun-emu``: AdamW, its state sharded over the launcher's replicas, over a
    ``poptorch.DataLoader``; every instance reads ``state_dict()`` (a gather of the shards),
    instance 0 saves it and the weights to ``out``."""
    import popdist
    import popdist.poptorch

    options = popdist.poptorch.Options()
    options.TensorLocations.setOptimizerLocation(
        poptorch.TensorLocationSettings().useReplicatedTensorSharding(True)
    )
    model = Loss()
    optimizer = OPTIMISERS["adamw"](model.parameters())
    x, y = batch(0)
    data = torch.utils.data.TensorDataset(torch.cat([x] * 4), torch.cat([y] * 4))
    training = poptorch.trainingModel(model, options, optimizer)
    for inputs, labels in poptorch.DataLoader(options, data, batch_size=4, shuffle=False):
        training(inputs, labels)
    state = optimizer.state_dict()
    if popdist.getInstanceIndex() == 0:
        torch.save({"model": model.state_dict(), "optimizer": state}, out)


if __name__ == "__main__":
    if sys.argv[1] == "--sharded":
        sharded_run(sys.argv[2])
        sys.exit()
    checkpoint, start, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    loaded = torch.load(checkpoint)
    torch.save({name: train(name, start, steps, loaded[name]) for name in loaded}, out)
