"""The torch module's weights are copied from the device when the host reads them, not before.

Every observation point PopTorch documents (and those a program meets in practice) is read
after training and must show the weights eager PyTorch trains; while nobody reads, the
module's tensors are not written (their version counters, shared by ``detach()``, do not
move); a host write sent by ``copyWeightsToDevice`` is what training continues from. All in
process, with real torch modules.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

poptorch = pytest.importorskip("popdist_emu.poptorch")

LR = 0.1


class Net(torch.nn.Module):
    """A linear layer and its MSE loss (``(output, loss)``, the tutorial's form)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.loss = torch.nn.MSELoss()

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> Any:
        out = self.fc(x)
        return out if y is None else (out, self.loss(out, y))


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(2, 4, generator=gen), torch.randn(2, 3, generator=gen)) for _ in range(n)]


def _eager(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """The same training in plain PyTorch (SGD, one step per batch)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in batches:
        optimizer.zero_grad()
        model(x, y)[1].backward()
        optimizer.step()


class Trained:
    """A model trained 3 calls on the emulator, its twin trained by eager PyTorch, and
    aliases of its weights (``detach()``: same memory and version counter, a plain tensor
    whose reads copy nothing) taken before training, their values and versions kept
    (:meth:`keep`) as of the last read."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = Net()
        self.eager = copy.deepcopy(self.model)
        self.optimizer = poptorch.optim.SGD(self.model.parameters(), lr=LR)
        self.training = poptorch.trainingModel(self.model, poptorch.Options(), self.optimizer)
        self.aliases = {n: p.detach() for n, p in self.model.named_parameters()}
        self.keep()
        self.train(_batches(3))

    def keep(self) -> None:
        """Keeps the weights' values and versions (after a read)."""
        self.initial = {n: a.clone() for n, a in self.aliases.items()}
        self.versions = {n: a._version for n, a in self.aliases.items()}

    def train(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        for x, y in batches:
            self.training(x, y)
        _eager(self.eager, batches)

    def host_is_eagers(self) -> bool:
        """Whether the module's memory holds eager PyTorch's trained weights."""
        eager = dict(self.eager.named_parameters())
        return all(
            torch.allclose(alias, eager[n].detach(), atol=1e-6) for n, alias in self.aliases.items()
        )

    def untouched(self) -> bool:
        """Whether the module's memory holds the kept weights, not written since."""
        return all(
            torch.equal(alias, self.initial[n]) and alias._version == self.versions[n]
            for n, alias in self.aliases.items()
        )


def _torch_save(run: Trained) -> None:
    buffer = io.BytesIO()
    torch.save(run.model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert type(loaded.fc.weight) is torch.nn.Parameter  # the real class is pickled
    assert torch.allclose(loaded.fc.weight, run.eager.fc.weight, atol=1e-6)


def _inference_twin(run: Trained) -> None:
    x = torch.randn(2, 4)
    out = poptorch.inferenceModel(run.model, poptorch.Options())(x)
    assert torch.allclose(out, run.eager(x), atol=1e-5)


READS: dict[str, Callable[[Trained], object]] = {
    "parameters": lambda r: [p.sum() for p in r.model.parameters()],
    "named_parameters": lambda r: [p.sum() for _, p in r.model.named_parameters()],
    "state_dict": lambda r: r.model.state_dict(),
    "attribute": lambda r: r.model.fc.weight + 0,
    "submodule_state_dict": lambda r: r.model.fc.state_dict(),
    "executor_model": lambda r: r.training.model.fc.bias.tolist(),
    "numpy": lambda r: np.asarray(r.model.fc.weight.detach()),
    "torch_function": lambda r: torch.equal(r.model.fc.weight, r.model.fc.weight),
    "optimizer_param_groups": lambda r: r.optimizer.param_groups[0]["params"][0].tolist(),
    "optimizer_state_dict": lambda r: r.optimizer.state_dict(),
    "torch_save": _torch_save,
    "inference_twin": _inference_twin,
    "copyWeightsToHost": lambda r: r.training.copyWeightsToHost(),
    "detachFromDevice": lambda r: r.training.detachFromDevice(),
}


@pytest.fixture(scope="module")
def run() -> Trained:
    """One trained model for the reads (each test trains it one more call first)."""
    return Trained()


@pytest.mark.parametrize("read", sorted(READS))
def test_each_read_copies_the_weights_eager_pytorch_trains(run: Trained, read: str) -> None:
    run.train(_batches(1))
    assert run.untouched(), "the weights were copied before anyone read them"
    READS[read](run)
    assert run.host_is_eagers()
    assert all(type(p) is torch.nn.Parameter for p in run.model.parameters())
    run.keep()


def test_nothing_is_copied_while_no_one_reads_and_one_copy_per_read() -> None:
    run = Trained()
    pointers = {n: a.data_ptr() for n, a in run.aliases.items()}
    assert run.untouched()
    run.model.state_dict()  # one read: one copy into each weight, in place
    assert {n: a._version - run.versions[n] for n, a in run.aliases.items()} == {
        "fc.weight": 1,
        "fc.bias": 1,
    }
    assert {n: a.data_ptr() for n, a in run.aliases.items()} == pointers
    run.model.state_dict()  # read again before a call: nothing new to copy
    versions = {n: a._version for n, a in run.aliases.items()}
    assert versions == {n: v + 1 for n, v in run.versions.items()}
    run.train(_batches(2))
    assert {n: a._version for n, a in run.aliases.items()} == versions  # no one read
    run.model.fc.bias.sum()  # reading one weight copies them all
    assert run.host_is_eagers()


@pytest.mark.parametrize("how", ["copyWeightsToDevice", "load_state_dict"])
def test_a_host_write_sent_to_the_device_is_trained_from(how: str) -> None:
    run = Trained()
    with torch.no_grad():  # the same write on both sides
        for model in (run.model, run.eager):
            model.fc.weight.fill_(0.25)
            model.fc.bias.zero_()
    if how == "copyWeightsToDevice":
        run.training.copyWeightsToDevice()
    else:
        run.training.load_state_dict(copy.deepcopy(run.eager.state_dict()))
    run.train(_batches(2))
    run.model.state_dict()  # a read
    assert run.host_is_eagers()


def test_a_write_to_a_weight_compiled_into_the_step_is_refused_in_one_line() -> None:
    torch.manual_seed(0)
    model = Net()
    model.fc.bias.requires_grad_(False)  # frozen: a constant of the compiled step
    training = poptorch.trainingModel(model, poptorch.Options())
    training(*_batches(1)[0])
    with torch.no_grad():
        model.fc.bias.fill_(1.0)
    with pytest.raises(ValueError, match=r"fc\.bias changed on the host") as error:
        training.copyWeightsToDevice()
    assert "\n" not in str(error.value)


def test_buffers_the_forward_changes_are_copied_when_read() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    wrapped = _WithLoss(model)
    eager = copy.deepcopy(wrapped)
    training = poptorch.trainingModel(wrapped, poptorch.Options(), poptorch.optim.SGD(
        wrapped.parameters(), lr=LR))  # fmt: skip
    mean = model[1].running_mean.detach()
    version = mean._version
    batches = _batches(2)
    for x, y in batches:
        training(x, y)
    _eager(eager, batches)
    assert mean._version == version and not mean.any()  # not copied yet
    state = wrapped.state_dict()
    assert torch.allclose(state["model.1.running_mean"], eager.model[1].running_mean, atol=1e-6)
    assert torch.allclose(mean, eager.model[1].running_mean, atol=1e-6)


class _WithLoss(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(x)
        return out, torch.nn.functional.mse_loss(out, y)
