"""PopART's recomputation on one IPU, in the step itself (``popdist_emu.poptorch._recompute``).

Graphcore's CNNs set ``autoRecomputation`` to ``RecomputeAll`` and mark checkpoints with
``poptorch.recomputationCheckpoint``; before, a step on one IPU kept every activation and
Graphcore's ResNet-50 at micro-batch 18 was refused as out of memory. Now the step keeps
only the checkpoints and what follows the last one, recomputes the rest (more FLOPs), and
trains to the same numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed")

import jax  # noqa: E402

import popdist_emu.poptorch as poptorch  # noqa: E402
from popdist_emu import sim  # noqa: E402
from popdist_emu.poptorch._recompute import CHECKPOINT, marking_checkpoints  # noqa: E402

STEPS, MICRO, ACCUMULATION = 3, 4, 2
RECOMPUTE_ALL, STANDARD = 4, 1


class _Net(torch.nn.Module):
    """Three wide layers (a linear map, tanh and its square) and a classifier;
    ``checkpoints`` marks the first two's outputs."""

    def __init__(self, checkpoints: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.checkpoints = checkpoints
        self.layers = torch.nn.ModuleList(
            [torch.nn.Linear(8, 256), torch.nn.Linear(256, 256), torch.nn.Linear(256, 256)]
        )
        self.head = torch.nn.Linear(256, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for k, layer in enumerate(self.layers):
            # The product's gradient reads the tanh's output: a value inside the segment
            # that PopART keeps without recomputation and recomputes with it.
            x = torch.tanh(layer(x))
            x = x * x
            if self.checkpoints and k < 2:
                x = poptorch.recomputationCheckpoint(x)
        out = self.head(x)
        return out, torch.nn.functional.cross_entropy(out, y)


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    size = MICRO * ACCUMULATION
    return [
        (
            torch.randn(size, 8, generator=generator),
            torch.randint(0, 3, (size,), generator=generator),
        )
        for _ in range(STEPS)
    ]


def _trained(checkpoints: bool, auto: int | None) -> tuple[list[float], Any, tuple]:
    """``STEPS`` calls of ``trainingModel`` on one IPU: the losses (each call's last
    micro-batch), its Trainer and the laid-out batch of the last call."""
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(ACCUMULATION)
    if auto is not None:
        opts._Popart.set("autoRecomputation", auto)
    model = _Net(checkpoints)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    losses = [float(training(x, y)[1]) for x, y in _data()]
    x, y = _data()[-1]
    batch = (x.numpy().reshape(1, ACCUMULATION, 1, MICRO, 8), y.numpy().reshape(1, -1, 1, MICRO))
    return losses, training._trainer, batch


def _pytorch_losses() -> list[float]:
    """The same training in plain PyTorch: each step's last micro-batch's loss."""
    model = _Net(checkpoints=True)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in _data():
        optimiser.zero_grad()
        for k in range(ACCUMULATION):
            part = slice(k * MICRO, (k + 1) * MICRO)
            loss = model(x[part], y[part])[1]
            (loss / ACCUMULATION).backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    return losses


def _measured(trainer: Any, batch: tuple) -> tuple[int, float]:
    """The simulated IPU's activation memory and one micro-batch's forward and backward
    FLOPs."""
    simulation = sim.simulate(trainer, batch)
    activations = simulation.replica.ipu_memory[0].categories["activations"]
    return activations, trainer.profile(batch).grad_flops


@pytest.fixture(scope="module")
def stored() -> tuple[list[float], int, float]:
    """The checkpointed model without recomputation: losses, activations, FLOPs."""
    losses, trainer, batch = _trained(checkpoints=True, auto=None)
    return (losses, *_measured(trainer, batch))


def test_recompute_all_keeps_the_checkpoints_and_trains_to_the_same_numbers(
    stored: tuple[list[float], int, float],
) -> None:
    losses, trainer, batch = _trained(checkpoints=True, auto=RECOMPUTE_ALL)
    activations, flops = _measured(trainer, batch)
    np.testing.assert_allclose(losses, stored[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(losses, _pytorch_losses(), rtol=1e-5, atol=1e-5)
    # The first two layers' forward is recomputed: their tanh outputs are kept (the
    # checkpoints) but not their inner values, and they run twice.
    assert activations < stored[1]
    assert flops > stored[2]


def test_recompute_all_without_checkpoints_keeps_everything_as_popart_does(
    stored: tuple[list[float], int, float],
) -> None:
    """PopART keeps every operation between the last checkpoint and the loss; without a
    checkpoint that is the whole forward (``allCheckpointAfterLastCheckpoint``)."""
    plain = _measured(*_trained(checkpoints=False, auto=None)[1:])
    recompute_all = _measured(*_trained(checkpoints=False, auto=RECOMPUTE_ALL)[1:])
    assert recompute_all == plain
    assert plain[0] == stored[1]  # a checkpoint alone changes nothing


def test_standard_keeps_every_activation(stored: tuple[list[float], int, float]) -> None:
    """PopART's Standard heuristic is not modelled: the larger bound, every activation."""
    assert _measured(*_trained(checkpoints=True, auto=STANDARD)[1:]) == stored[1:]


class _ResidualCnn(torch.nn.Module):
    """Two residual blocks of convolution and BatchNorm (its running statistics change, as
    ResNet-50's do), a checkpoint after each block's add, as Graphcore's ResNet-50 has."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.convs = torch.nn.ModuleList([torch.nn.Conv2d(8, 8, 3, padding=1) for _ in "ab"])
        self.norms = torch.nn.ModuleList([torch.nn.BatchNorm2d(8) for _ in "ab"])
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.stem(x)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = torch.relu(poptorch.recomputationCheckpoint(x + norm(conv(x))))
        out = self.head(x.mean((2, 3)))
        return out, torch.nn.functional.cross_entropy(out, y)


def _cnn(auto: int | None) -> tuple[list[float], tuple[int, float], dict[str, Any]]:
    """Two calls of the CNN on one IPU: losses, (activations, FLOPs), the trained weights."""
    opts = poptorch.Options()
    if auto is not None:
        opts._Popart.set("autoRecomputation", auto)
    model = _ResidualCnn()
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    generator = torch.Generator().manual_seed(2)
    x, y = torch.randn(4, 3, 8, 8, generator=generator), torch.tensor([0, 1, 2, 0])
    losses = [float(training(x, y)[1]) for _ in range(2)]
    batch = (x.numpy().reshape(1, 1, 1, 4, 3, 8, 8), y.numpy().reshape(1, 1, 1, 4))
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return losses, _measured(training._trainer, batch), weights


def test_a_residual_cnn_with_batch_norm_recomputes_between_its_checkpoints() -> None:
    losses, (activations, flops), weights = _cnn(auto=None)
    r_losses, (r_activations, r_flops), r_weights = _cnn(auto=RECOMPUTE_ALL)
    np.testing.assert_allclose(r_losses, losses, rtol=1e-6, atol=1e-6)
    for name, value in weights.items():  # running statistics included
        np.testing.assert_allclose(r_weights[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert r_activations < activations
    assert r_flops > flops


def test_a_checkpoint_names_traced_tensors_and_returns_eager_ones() -> None:
    a, b = torch.ones(2), torch.zeros(3)
    assert poptorch.recomputationCheckpoint(a) is a
    assert poptorch.recomputationCheckpoint(a, b) == (a, b)
    training = poptorch.trainingModel(_Net(checkpoints=True))
    weights = training._weights()
    x, y = jax.numpy.ones((2, 8)), jax.numpy.zeros((2,), "int32")
    with marking_checkpoints():
        marked = jax.make_jaxpr(training._fn)(weights, (x, y))
    unmarked = jax.make_jaxpr(training._fn)(weights, (x, y))
    assert [e.params.get("name") for e in marked.eqns].count(CHECKPOINT) == 2
    assert len(unmarked.eqns) == len(marked.eqns) - 2  # an identity unless recomputing
