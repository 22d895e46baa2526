"""Tensors a traced forward makes from nothing (``torch.ones``, ``torch.arange``,
``torch.rand``) are made on the device, as PopTorch traces them.

Graphcore's CNN training mixes its images with coefficients its forward draws with
``torch.rand`` (``datasets/augmentations.py``); such a tensor was made on the CPU beside the
traced ones, and the first product of the two failed ("mixed math between XLATensor and
torch.Tensor"), so EfficientNet-B4's configuration could not run.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed")

import popdist_emu.poptorch as poptorch  # noqa: E402


class _Net(torch.nn.Module):
    """A linear layer whose input is scaled by constants its forward makes and, with
    ``mix``, mixed with its batch reversed by coefficients it draws, as mixup does."""

    def __init__(self, mix: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.mix = mix
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x * (torch.ones(1) + torch.arange(3).sum() / 3.0)  # twice x, from constants
        if self.mix:
            coeffs = torch.rand(x.shape[0], dtype=x.dtype).reshape(-1, 1)
            x = coeffs * x + (1.0 - coeffs) * torch.flip(x, (0,))
        out = self.layer(x)
        return out, torch.nn.functional.cross_entropy(out, y)


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(4, 4, generator=generator), torch.randint(0, 3, (4,), generator=generator))
        for _ in range(3)
    ]


def _losses(mix: bool, seed: int = 0) -> list[float]:
    opts = poptorch.Options().randomSeed(seed)
    model = _Net(mix)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    return [float(training(x, y)[1]) for x, y in _batches()]


def _eager_losses() -> list[float]:
    model = _Net(mix=False)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in _batches():
        optimiser.zero_grad()
        loss = model(x, y)[1]
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    return losses


def test_constants_made_in_the_forward_train_as_in_pytorch() -> None:
    np.testing.assert_allclose(_losses(mix=False), _eager_losses(), rtol=1e-5, atol=1e-6)


def test_random_coefficients_drawn_in_the_forward_come_from_the_options_seed() -> None:
    mixed = _losses(mix=True)
    assert all(np.isfinite(mixed))
    assert mixed == _losses(mix=True)  # the same seed, the same draws
    assert mixed != _losses(mix=True, seed=7)  # another seed, other draws
    assert mixed != _losses(mix=False)  # the draws mix the batch
