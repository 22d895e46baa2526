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
