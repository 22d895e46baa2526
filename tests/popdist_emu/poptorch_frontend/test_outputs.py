"""What a training call returns besides the loss: each micro-batch's outputs, computed with
the weights of its own device iteration, as PopTorch computes them inside the step.

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

import popdist_emu.poptorch as poptorch  # noqa: E402

ITERATIONS, ACCUMULATION, MICRO = 3, 2, 4


class _Net(torch.nn.Module):
    """Two dense layers; the forward returns the logits, their argmax and the loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.hidden = torch.nn.Linear(6, 8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.head(torch.relu(self.hidden(x)))
        return logits, logits.argmax(dim=1), torch.nn.functional.cross_entropy(logits, y)


def _expected(reference: _Net, x: torch.Tensor, y: torch.Tensor) -> tuple[list, list]:
    """PyTorch eager, micro-batch by micro-batch: every micro-batch's logits and argmax with
    the weights its device iteration starts from, then that iteration's update."""
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    logits, labels = [], []
    for d in range(ITERATIONS):
        optimizer.zero_grad()
        for a in range(ACCUMULATION):
            part = slice((d * ACCUMULATION + a) * MICRO, (d * ACCUMULATION + a + 1) * MICRO)
            out, argmax, loss = reference(x[part], y[part])
            (loss / ACCUMULATION).backward()
            logits.append(out.detach())
            labels.append(argmax)
        optimizer.step()
    return logits, labels


@pytest.mark.parametrize("mode", ["All", "Final"])
def test_each_micro_batch_has_the_outputs_of_its_iterations_weights(mode: str) -> None:
    """Three device iterations of two micro-batches: the logits and the argmax each call
    returns are PyTorch eager's with the weights of the micro-batch's own iteration (every
    iteration's for OutputMode.All, the last one's for Final), after two calls."""
    emulated, reference = _Net(), _Net()
    opts = poptorch.Options().deviceIterations(ITERATIONS)
    opts.Training.gradientAccumulation(ACCUMULATION)
    opts.outputMode(getattr(poptorch.OutputMode, mode))
    training = poptorch.trainingModel(
        emulated, opts, torch.optim.SGD(emulated.parameters(), lr=0.5)
    )
    generator = torch.Generator().manual_seed(7)
    size = ITERATIONS * ACCUMULATION * MICRO
    for _ in range(2):
        x, y = torch.randn(size, 6, generator=generator), torch.randint(0, 3, (size,))
        logits, argmax, loss = training(x, y)
        want_logits, want_argmax = _expected(reference, x, y)
        if mode == "Final":
            last = ACCUMULATION  # micro-batches of the last device iteration
            want_logits, want_argmax = want_logits[-last:], want_argmax[-last:]
        assert logits.shape == (len(want_logits) * MICRO, 3)
        np.testing.assert_allclose(
            logits.numpy(), torch.cat(want_logits).numpy(), rtol=1e-5, atol=1e-6
        )
        assert torch.equal(argmax.to(torch.int64), torch.cat(want_argmax))
        assert loss.shape == ((ITERATIONS,) if mode == "All" else ())
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(
            emulated.state_dict()[name].numpy(), value.numpy(), rtol=1e-5, atol=1e-6
        )
