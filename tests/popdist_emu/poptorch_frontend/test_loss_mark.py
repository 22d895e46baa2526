"""The loss a training model minimises is the output ``identity_loss`` marked, wherever the
forward returns it: Graphcore's BERT and GPT-2 return it first, accuracies after it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed")

import popdist_emu.poptorch as poptorch  # noqa: E402


class _LossThenAccuracy(torch.nn.Module):
    """Returns ``(loss, accuracy)`` as BERT and GPT-2 do; ``blocks`` puts the two layers on
    two IPUs (pipelined), as their ``BeginBlock`` layers are."""

    def __init__(self, blocks: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)
        if blocks:
            poptorch.BeginBlock(self.a, "A", ipu_id=0)
            poptorch.BeginBlock(self.b, "B", ipu_id=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.b(torch.relu(self.a(x)))
        loss = torch.nn.functional.cross_entropy(logits, y)
        accuracy = (logits.argmax(-1) == y).float().mean()  # no gradient
        return poptorch.identity_loss(loss, reduction="none"), accuracy


@pytest.mark.parametrize("blocks", [False, True], ids=["one IPU", "pipelined"])
def test_the_identity_loss_output_is_minimised_not_the_last(blocks: bool) -> None:
    """Training follows PyTorch eager minimising the first output; minimising the last (the
    accuracy, whose gradient is zero) would leave the weights where they started."""
    opts = poptorch.Options()
    if blocks:
        opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
        opts.Training.gradientAccumulation(4)
    model, reference = _LossThenAccuracy(blocks), _LossThenAccuracy(False)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.5))
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 4, generator=generator), torch.arange(8) % 3
    for _ in range(3):
        training(x, y)
        optimizer.zero_grad()
        reference(x, y)[0].backward()
        optimizer.step()
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(
            model.state_dict()[name].numpy(), value.numpy(), rtol=1e-4, atol=1e-5
        )
