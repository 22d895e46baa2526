"""The loss is the output ``identity_loss`` returned, wherever the forward puts it.

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

import popdist_emu.poptorch as poptorch  # noqa: E402


class _LossFirst(torch.nn.Module):
    """Graphcore's CNN training wrapper's shape: ``(loss, (losses,), (accuracy,))``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple:
        out = self.linear(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        accuracy = (out.argmax(1) == y).float().mean() * 100.0
        return poptorch.identity_loss(loss, reduction="none"), (loss,), (accuracy,)


def test_the_marked_loss_trains_though_another_output_comes_last() -> None:
    emulated, reference = _LossFirst(), _LossFirst()
    training = poptorch.trainingModel(
        emulated, poptorch.Options(), torch.optim.SGD(emulated.parameters(), lr=0.5)
    )
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, generator=generator), torch.randint(0, 4, (8,), generator=generator)
    for _ in range(3):
        loss, (again,), (accuracy,) = training(x, y)
        optimizer.zero_grad()
        want = reference(x, y)[0]
        want.backward()
        optimizer.step()
        np.testing.assert_allclose(float(loss), want.detach().item(), rtol=1e-5)
        assert float(again) == pytest.approx(float(loss)) and 0.0 <= float(accuracy) <= 100.0
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(
            emulated.state_dict()[name].numpy(), value.numpy(), rtol=1e-5, atol=1e-6
        )


class _OneElementLoss(torch.nn.Module):
    """ViT's mixup loss: ``identity_loss(lam * loss_a + (1 - lam) * loss_b, "none")`` with
    one coefficient a micro-batch, so the loss has shape ``[1]``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor, lam: torch.Tensor) -> tuple:
        loss = torch.nn.functional.cross_entropy(self.linear(x), y)
        return poptorch.identity_loss(lam * loss, reduction="none"), lam


def test_a_one_element_loss_is_the_scalar_poptorch_takes_it_for() -> None:
    emulated, reference = _OneElementLoss(), _OneElementLoss()
    opts = poptorch.Options().deviceIterations(2).outputMode(poptorch.OutputMode.All)
    training = poptorch.trainingModel(
        emulated, opts, torch.optim.SGD(emulated.parameters(), lr=0.5)
    )
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, generator=generator), torch.randint(0, 4, (8,), generator=generator)
    lam = torch.tensor([0.5, 2.0])  # one a micro-batch
    losses, _ = training(x, y, lam)
    assert losses.shape == (2,)  # each micro-batch's [1]-shaped loss, as the host gets it
    for d in range(2):
        optimizer.zero_grad()
        reference(x[4 * d : 4 * d + 4], y[4 * d : 4 * d + 4], lam[d : d + 1])[0].sum().backward()
        optimizer.step()
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(
            emulated.state_dict()[name].numpy(), value.numpy(), rtol=1e-5, atol=1e-6
        )
