"""A PopTorch model called with its forward's arguments by name (Graphcore's GPT-2 calls
``poptorch_model(input_ids=..., labels=...)``) runs as called positionally."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed")

import popdist_emu.poptorch as poptorch  # noqa: E402


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 3)

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, scale: float = 2.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        loss = torch.nn.functional.cross_entropy(self.linear(x) * scale, y)
        return loss, self.linear(x).argmax(-1)


def test_keyword_arguments_bind_to_the_forwards_signature() -> None:
    x, y = torch.linspace(-1, 1, 12).reshape(4, 3), torch.arange(4) % 3
    model = poptorch.inferenceModel(_Scaled())
    positional = model(x, y)[0]
    np.testing.assert_allclose(model(y=y, x=x)[0].numpy(), positional.numpy())
    np.testing.assert_allclose(model(x, y=y)[0].numpy(), positional.numpy())
    with pytest.raises(TypeError, match="does not take this call's arguments"):
        model(x, label=y)
    with pytest.raises(TypeError, match="'x' is missing"):
        model(y=y)
