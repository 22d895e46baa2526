"""``setOptimizer`` changes each parameter group's learning rate, as Graphcore's CNNs and ViT
call it after every scheduler step (two groups: weight decay on the weights only).

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

import popdist_emu.poptorch as poptorch  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.linear(x), y)


def _groups(model: _Net) -> list[dict]:
    return [
        {"params": [model.linear.weight], "weight_decay": 0.1},
        {"params": [model.linear.bias], "weight_decay": 0.0},
    ]


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_each_groups_learning_rate_changes_as_pytorchs_does(kind: str) -> None:
    emulated, reference = _Net(), _Net()
    make = getattr(poptorch.optim, kind)
    extra = {"momentum": 0.9} if kind == "SGD" else {}
    optimizer = make(_groups(emulated), lr=0.2, **extra)
    training = poptorch.trainingModel(emulated, poptorch.Options(), optimizer)
    torch_optimizer = getattr(torch.optim, kind)(_groups(reference), lr=0.2, **extra)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, generator=generator), torch.randint(0, 4, (8,), generator=generator)
    for step in range(4):
        loss = training(x, y)
        torch_optimizer.zero_grad()
        want = reference(x, y)
        want.backward()
        torch_optimizer.step()
        np.testing.assert_allclose(float(loss), want.item(), rtol=1e-5)
        for group, torch_group, scale in zip(
            optimizer.param_groups, torch_optimizer.param_groups, (0.5, 0.25), strict=True
        ):
            group["lr"] = torch_group["lr"] = 0.2 * scale ** (step + 1)
        training.setOptimizer(optimizer)
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(
            emulated.state_dict()[name].numpy(), value.numpy(), rtol=1e-5, atol=1e-6
        )


def test_a_change_to_the_groups_is_refused_in_one_line() -> None:
    model = _Net()
    training = poptorch.trainingModel(
        model, poptorch.Options(), poptorch.optim.SGD(_groups(model), lr=0.1)
    )
    other = poptorch.optim.SGD(_groups(model), lr=0.1)
    other.param_groups[1]["weight_decay"] = 0.5
    with pytest.raises(ValueError, match="learning rate only") as info:
        training.setOptimizer(other)
    assert "\n" not in str(info.value)
