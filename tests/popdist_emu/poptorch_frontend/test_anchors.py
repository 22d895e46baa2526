"""Anchored tensors (``_anchors``): weights, gradients and updated weights as PopTorch names
them, against PyTorch eager over device iterations and gradient accumulation."""

from __future__ import annotations

import pytest
import torch

import popdist_emu.poptorch as poptorch

F = torch.nn.functional
ITERATIONS, ACCUMULATION, MICRO, LR = 2, 2, 2, 0.1


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(3, 2)
        self.bn = torch.nn.BatchNorm1d(2, track_running_stats=True)  # a buffer, not changed
        self.bn.eval()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.fc(x)
        return out, F.mse_loss(out, y)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    samples = ITERATIONS * ACCUMULATION * MICRO
    return torch.randn(samples, 3, generator=generator), torch.randn(
        samples, 2, generator=generator
    )


def _eager() -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """PyTorch's weights before each device iteration (and after the last) and each
    micro-batch's gradient of ``fc.weight``, with SGD on the mean of the accumulated ones."""
    net, (x, y) = _Net(), _batch()
    weights, grads = [net.fc.weight.detach().clone()], []
    for d in range(ITERATIONS):
        per_micro, total = [], [torch.zeros_like(p) for p in net.fc.parameters()]
        for a in range(ACCUMULATION):
            rows = slice((d * ACCUMULATION + a) * MICRO, (d * ACCUMULATION + a + 1) * MICRO)
            net.zero_grad()
            net(x[rows], y[rows])[1].backward()
            per_micro.append(net.fc.weight.grad.clone())
            total = [t + p.grad for t, p in zip(total, net.fc.parameters(), strict=True)]
        with torch.no_grad():
            for t, p in zip(total, net.fc.parameters(), strict=True):
                p -= LR * t / ACCUMULATION
        weights.append(net.fc.weight.detach().clone())
        grads.append(per_micro)
    return weights, grads


def _model(opts: poptorch.Options) -> poptorch.PoplarExecutor:
    opts.deviceIterations(ITERATIONS).Training.gradientAccumulation(ACCUMULATION)
    net = _Net()
    return poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=LR))


def test_anchors_are_pytorchs_weights_and_gradients() -> None:
    opts = poptorch.Options()
    opts.anchorTensor("grad", "Gradient___fc.weight")
    opts.anchorTensor("before", "fc.weight")
    opts.anchorTensor("after", "UpdatedVar___fc.weight")
    opts.anchorTensor("every_grad", "Gradient___fc.weight", poptorch.OutputMode.All)
    opts.anchorTensor("mean", "bn.running_mean")
    model = _model(opts)
    model(*_batch())
    weights, grads = _eager()
    # Final (the model's mode): the last micro-batch of the last device iteration.
    torch.testing.assert_close(model.getAnchoredTensor("grad"), grads[-1][-1])
    torch.testing.assert_close(model.getAnchoredTensor("before"), weights[-2])
    torch.testing.assert_close(model.getAnchoredTensor("after"), weights[-1])
    every = torch.cat([g for per_micro in grads for g in per_micro])
    torch.testing.assert_close(model.getAnchoredTensor("every_grad"), every)
    torch.testing.assert_close(model.getAnchoredTensor("mean"), torch.zeros(2))
    names = model.getTensorNames()
    assert {"fc.weight", "Gradient___fc.bias", "UpdatedVar___fc.weight", "bn.running_var"} <= set(
        names
    )


def test_anchoring_changes_no_number_of_training() -> None:
    anchored = poptorch.Options()
    anchored.anchorTensor("grad", "Gradient___fc.weight", poptorch.OutputMode.All)
    plain, model = _model(poptorch.Options()), _model(anchored)
    torch.testing.assert_close(model(*_batch()), plain(*_batch()), rtol=0, atol=0)
    torch.testing.assert_close(model.fc.weight, plain.fc.weight, rtol=0, atol=0)


def test_anchors_refused_in_one_line() -> None:
    opts = poptorch.Options()
    opts.anchorTensor("act", "MatMul:0/1")
    model = _model(opts)
    with pytest.raises(RuntimeError, match="not compiled yet"):
        model.getTensorNames()
    with pytest.raises(ValueError) as info:
        model(*_batch())
    assert "anchorTensor('act', 'MatMul:0/1'): this model has no such tensor" in str(info.value)
    good = poptorch.Options()
    good.anchorTensor("w", "fc.weight")
    model = _model(good)
    with pytest.raises(ValueError, match="no call has run yet"):
        model.getAnchoredTensor("w")
    model(*_batch())
    with pytest.raises(ValueError, match=r"no anchor of that name \(anchored: 'w'\)"):
        model.getAnchoredTensor("v")
    with pytest.raises(ValueError, match="anchors a training model's tensors only"):
        poptorch.inferenceModel(_Net(), good).getAnchoredTensor("w")
    with pytest.raises(ValueError, match="pass two strings"):
        good.anchorTensor("w", 3)  # type: ignore[arg-type]
