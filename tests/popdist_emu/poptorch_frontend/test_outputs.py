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


def _expected(
    reference: _Net, x: torch.Tensor, y: torch.Tensor, replicas: int
) -> tuple[list, list]:
    """PyTorch eager, micro-batch by micro-batch in the combined batch's order (device
    iteration, accumulation, replica): every micro-batch's logits and argmax with the weights
    its device iteration starts from, then that iteration's update (the mean over its
    micro-batches of every replica)."""
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    logits, labels = [], []
    micro_batches = ACCUMULATION * replicas
    for d in range(ITERATIONS):
        optimizer.zero_grad()
        for m in range(micro_batches):
            part = slice((d * micro_batches + m) * MICRO, (d * micro_batches + m + 1) * MICRO)
            out, argmax, loss = reference(x[part], y[part])
            (loss / micro_batches).backward()
            logits.append(out.detach())
            labels.append(argmax)
        optimizer.step()
    return logits, labels


@pytest.mark.parametrize(("mode", "replicas"), [("All", 1), ("Final", 1), ("All", 2)])
def test_each_micro_batch_has_the_outputs_of_its_iterations_weights(
    mode: str, replicas: int
) -> None:
    """Three device iterations of two micro-batches (on each of two local replicas): the
    logits and the argmax each call returns are PyTorch eager's with the weights of the
    micro-batch's own iteration (every iteration's for OutputMode.All, the last one's for
    Final), after two calls."""
    emulated, reference = _Net(), _Net()
    opts = poptorch.Options().deviceIterations(ITERATIONS).replicationFactor(replicas)
    opts.Training.gradientAccumulation(ACCUMULATION)
    opts.outputMode(getattr(poptorch.OutputMode, mode))
    training = poptorch.trainingModel(
        emulated, opts, torch.optim.SGD(emulated.parameters(), lr=0.5)
    )
    generator = torch.Generator().manual_seed(7)
    size = ITERATIONS * ACCUMULATION * replicas * MICRO
    for _ in range(2):
        x, y = torch.randn(size, 6, generator=generator), torch.randint(0, 3, (size,))
        logits, argmax, loss = training(x, y)
        want_logits, want_argmax = _expected(reference, x, y, replicas)
        if mode == "Final":
            last = ACCUMULATION * replicas  # micro-batches of the last device iteration
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


class _WeightOut(torch.nn.Module):
    """Returns a weight whose first dimension equals the micro-batch, and the loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.hidden = torch.nn.Linear(6, MICRO)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.hidden(x)[:, :3]
        return self.hidden.weight * 1.0, torch.nn.functional.cross_entropy(logits, y)


def test_an_output_of_the_micro_batchs_length_by_chance_is_not_laid_end_to_end() -> None:
    """A weight of ``MICRO`` rows is not a per-sample output: the call returns it once, as
    the model's forward over the call's batch gives it (the weights the call started from),
    not one copy per micro-batch."""
    model = _WeightOut()
    opts = poptorch.Options().deviceIterations(ITERATIONS).outputMode(poptorch.OutputMode.All)
    opts.Training.gradientAccumulation(ACCUMULATION)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.5))
    size = ITERATIONS * ACCUMULATION * MICRO
    before = model.hidden.weight.detach().clone()
    weight, _ = training(torch.randn(size, 6), torch.randint(0, 3, (size,)))
    assert weight.shape == before.shape == (MICRO, 6)
    np.testing.assert_allclose(weight.numpy(), before.numpy(), rtol=1e-6)
