"""A wrapped model stands in for its module, and PopTorch's device calls (``_device``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import popdist_emu.poptorch as poptorch


class _Net(torch.nn.Module):
    """A module with a custom attribute and method, as Graphcore's applications read them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.config = {"hidden": 2}

    def describe(self) -> str:
        return f"net of {self.config['hidden']}"

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.fc(x)
        return out, torch.nn.functional.mse_loss(out, y)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(4, 3, generator=generator), torch.randn(4, 2, generator=generator)


def _trained() -> tuple[_Net, poptorch.PoplarExecutor]:
    torch.manual_seed(0)
    net = _Net()
    model = poptorch.trainingModel(net, poptorch.Options())
    model(*_batch())
    return net, model


def test_a_wrapped_model_is_its_module() -> None:
    net, model = _trained()
    assert isinstance(model, poptorch.PoplarExecutor)
    assert model.model is net
    assert model.config == {"hidden": 2} and model.describe() == "net of 2"
    assert model.eval() is net and not net.training
    assert model.train() is net and net.training
    assert list(model.state_dict()) == ["fc.weight", "fc.bias"]
    assert torch.equal(model.state_dict()["fc.bias"], net.fc.bias.detach())
    assert [n for n, _ in model.named_parameters()] == ["fc.weight", "fc.bias"]
    assert model.fc is net.fc
    with pytest.raises(AttributeError) as info:
        model.missing  # noqa: B018
    assert "_Net wrapped by poptorch has no attribute 'missing'" in str(info.value)
    assert "\n" not in str(info.value)


def test_load_state_dict_and_copy_weights_to_device_reach_the_device() -> None:
    net, model = _trained()
    x, y = _batch()
    model.load_state_dict({k: torch.zeros_like(v) for k, v in net.state_dict().items()})
    # Zero weights on the device: the next call's loss is the loss of zero outputs.
    loss = model(x, y)[1]
    assert torch.allclose(loss, torch.nn.functional.mse_loss(torch.zeros(4, 2), y))
    with torch.no_grad():
        net.fc.weight.fill_(0.0)
        net.fc.bias.fill_(1.0)
    model.copyWeightsToDevice()
    loss = model(x, y)[1]
    assert torch.allclose(loss, torch.nn.functional.mse_loss(torch.ones(4, 2), y))


def test_compiled_and_attached_as_poptorch_says() -> None:
    model = poptorch.inferenceModel(_Net())
    assert not model.isCompiled() and not model.isAttachedToDevice()
    assert not model._executable
    for call in (model.attachToDevice, model.copyWeightsToDevice):
        with pytest.raises(RuntimeError, match="not compiled yet"):
            call()
    model(*_batch())
    assert model.isCompiled() and model.isAttachedToDevice() and model._executable
    with pytest.raises(RuntimeError, match="already attached"):
        model.attachToDevice()
    model.detachFromDevice()
    assert not model.isAttachedToDevice()
    model.attachToDevice()
    assert model.isAttachedToDevice()


def test_latency_is_the_simulated_steps() -> None:
    _, model = _trained()
    low, high, mean = model.getLatency()
    latest = model._programs.latest
    assert latest is not None and low == high == mean == latest.simulated_step_seconds > 0
    with pytest.raises(RuntimeError, match="simulates training steps only"):
        poptorch.inferenceModel(_Net()).getLatency()
    with pytest.raises(RuntimeError, match="no call has run yet"):
        poptorch.trainingModel(_Net()).getLatency()


def test_export_records_the_model_and_load_checks_it(tmp_path: Path) -> None:
    x, y = _batch()
    path = tmp_path / "model.popef"
    poptorch.trainingModel(_Net(), poptorch.Options()).compileAndExport(path, x, y)
    record = json.loads(path.read_text())
    assert record["model"] == "_Net" and record["inputs"] == [
        [[4, 3], "float32"],
        [[4, 2], "float32"],
    ]
    assert record["parameters"]["fc.weight"] == [[2, 3], "float32"]
    same = poptorch.trainingModel(_Net(), poptorch.Options())
    same.loadExecutable(path)
    assert same.isCompiled()
    other = poptorch.trainingModel(_Net(), poptorch.Options().deviceIterations(2))
    with pytest.raises(ValueError) as info:
        other.loadExecutable(path)
    assert "its options 'device_iterations' is 1, this model's 2" in str(info.value)
    with pytest.raises(ValueError, match="its training is true, this model's false"):
        poptorch.inferenceModel(_Net()).loadExecutable(path)
    path.write_text("not json")
    with pytest.raises(ValueError, match="pass a file written by compileAndExport"):
        same.loadExecutable(path)
