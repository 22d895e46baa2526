"""Buffers the forward changes (BatchNorm's running statistics) change as in PopTorch.

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

import popdist_emu.poptorch as poptorch  # noqa: E402


class _ConvNet(torch.nn.Module):
    """A convolution, BatchNorm and a classifier; the forward returns outputs and loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.norm(self.conv(x)))
        out = self.head(hidden.flatten(1))
        return out, torch.nn.functional.cross_entropy(out, y)


def _data(calls: int, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(5)
    return [
        (torch.randn(size, 2, 4, 4, generator=generator), torch.randint(0, 3, (size,)))
        for _ in range(calls)
    ]


def _assert_state_close(got: torch.nn.Module, want: torch.nn.Module) -> None:
    for name, value in want.state_dict().items():
        np.testing.assert_allclose(
            got.state_dict()[name].double().numpy(),
            value.double().numpy(),
            rtol=1e-5,
            atol=1e-6,
            err_msg=name,
        )


def test_batch_norm_statistics_follow_pytorch_micro_batch_by_micro_batch() -> None:
    """Device iterations 2 x accumulation 2: running mean, variance and count, weights and
    the eval-mode outputs afterwards all as PyTorch eager gets them."""
    iterations, accumulation, micro = 2, 2, 4
    emulated, reference = _ConvNet(), _ConvNet()
    opts = poptorch.Options().deviceIterations(iterations).outputMode(poptorch.OutputMode.All)
    opts.Training.gradientAccumulation(accumulation)
    training = poptorch.trainingModel(
        emulated, opts, torch.optim.SGD(emulated.parameters(), lr=0.1, momentum=0.9)
    )
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    data = _data(3, iterations * accumulation * micro)
    for x, y in data:
        out, _ = training(x, y)
        expected = []
        for d in range(iterations):
            optimizer.zero_grad()
            for a in range(accumulation):
                part = slice((d * accumulation + a) * micro, (d * accumulation + a + 1) * micro)
                logits, loss = reference(x[part], y[part])
                (loss / accumulation).backward()
                expected.append(logits.detach())
            optimizer.step()
        # Each micro-batch's outputs, from its own batch statistics and its iteration's weights.
        np.testing.assert_allclose(out.numpy(), torch.cat(expected).numpy(), rtol=1e-5, atol=1e-5)
    assert int(emulated.norm.num_batches_tracked) == 3 * iterations * accumulation
    assert not torch.allclose(emulated.norm.running_mean, torch.zeros(4))
    _assert_state_close(emulated, reference)
    emulated.eval()
    reference.eval()
    x, y = data[0]
    inference = poptorch.inferenceModel(emulated)
    np.testing.assert_allclose(
        inference(x, y)[0].numpy(), reference(x, y)[0].detach().numpy(), rtol=1e-5, atol=1e-5
    )


class _Recorder(torch.nn.Module):
    """A buffer that records a parameter (PopTorch's own buffer test): it shows from which
    weights each micro-batch's change is made."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        with torch.no_grad():
            self.linear.weight.fill_(1.0)
            self.linear.bias.fill_(1.0)
        self.register_buffer("record", torch.zeros(2))

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.linear(x)
        with torch.no_grad():
            self.record += self.linear.bias[0]
        return out, torch.nn.functional.l1_loss(out, target)


@pytest.mark.parametrize(("iterations", "accumulation"), [(1, 3), (3, 1), (3, 3)])
def test_a_buffer_records_each_micro_batch_from_its_iterations_weights(
    iterations: int, accumulation: int
) -> None:
    emulated, reference = _Recorder(), _Recorder()
    opts = poptorch.Options().deviceIterations(iterations)
    opts.Training.gradientAccumulation(accumulation)
    training = poptorch.trainingModel(
        emulated, opts, torch.optim.SGD(emulated.parameters(), lr=0.1)
    )
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    x = torch.ones(2 * iterations * accumulation, 2)
    for _ in range(4):
        training(x, torch.zeros_like(x))
        for _ in range(iterations):
            optimizer.zero_grad()
            for _ in range(accumulation):
                (reference(x[:2], torch.zeros(2, 2))[1] / accumulation).backward()
            optimizer.step()
    _assert_state_close(emulated, reference)


class _Tally(torch.nn.Module):
    """A buffer the forward changes that is not BatchNorm's: a count of calls."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count += 1.0
        return self.linear(x).mean()


@pytest.mark.parametrize("broadcast", [True, False])
def test_replicas_keep_their_own_batch_norm_statistics_and_the_host_sees_the_first(
    broadcast: bool,
) -> None:
    """BatchNorm's running statistics change under replication whatever
    ``broadcastBuffers`` says (PopTorch's ``BUFFERS_CAN_CHANGE``; Graphcore's ResNet-50
    trains so on 16 replicas): each replica keeps its own, and the host gets replica 0's,
    while the weights train on both replicas' gradients."""
    micro = 4
    emulated, reference = _ConvNet(), _ConvNet()
    opts = poptorch.Options().replicationFactor(2).broadcastBuffers(broadcast)
    training = poptorch.trainingModel(
        emulated, opts, torch.optim.SGD(emulated.parameters(), lr=0.1)
    )
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in _data(3, 2 * micro):
        training(x, y)
        optimizer.zero_grad()
        loss = reference(x[:micro], y[:micro])[1]  # replica 0: its statistics are kept
        kept = {k: v.clone() for k, v in reference.norm.state_dict().items()}
        loss = loss + reference(x[micro:], y[micro:])[1]  # replica 1: its own copy
        (loss / 2).backward()
        reference.norm.load_state_dict(kept)
        optimizer.step()
    _assert_state_close(emulated, reference)


def test_other_buffers_changed_under_replication_need_broadcast_buffers_false() -> None:
    """PopTorch refuses buffers the forward changes in place under replication unless
    ``broadcastBuffers(False)``, in one line; after it, the model trains."""
    refused = poptorch.trainingModel(_Tally(), poptorch.Options().replicationFactor(2))
    with pytest.raises(ValueError, match=r"broadcastBuffers\(False\)") as info:
        refused(torch.ones(4, 2))
    assert "\n" not in str(info.value)
    opts = poptorch.Options().replicationFactor(2).broadcastBuffers(False)
    model = _Tally()
    poptorch.trainingModel(model, opts)(torch.ones(4, 2))
    assert float(model.count) == 1.0


def test_a_loss_that_reads_a_buffer_it_changes_is_refused_in_one_line() -> None:
    class Counter(_Tally):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.count += 1.0
            return (self.linear(x) * self.count).mean()

    training = poptorch.trainingModel(Counter(), poptorch.Options())
    with pytest.raises(ValueError, match="count") as info:
        training(torch.ones(2, 2))
    assert "\n" not in str(info.value)


def test_an_inference_model_changes_its_buffers_call_by_call() -> None:
    """PopTorch's own buffer test: a buffer incremented by every call, with no input; the
    host sees it after ``copyWeightsToHost``, as PopTorch's guide says."""

    class Steps(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("x", torch.tensor([1.0]))

        def forward(self, y: torch.Tensor) -> torch.Tensor:
            self.x += 1.0
            return self.x + 0 * y

    model = Steps()
    inference = poptorch.inferenceModel(model)
    assert [float(inference(torch.zeros(1))[0]) for _ in range(4)] == [2.0, 3.0, 4.0, 5.0]
    assert float(model.x) == 1.0
    inference.copyWeightsToHost()
    assert float(model.x) == 5.0


def test_training_and_inference_models_of_one_module_each_run_in_their_own_mode() -> None:
    """Both wrappers made up front (as Graphcore's programs do): training still records the
    statistics, and validation between training calls normalises with them (eval mode),
    changing nothing."""
    emulated, reference = _ConvNet(), _ConvNet()
    training = poptorch.trainingModel(
        emulated, poptorch.Options(), torch.optim.SGD(emulated.parameters(), lr=0.1)
    )
    inference = poptorch.inferenceModel(emulated)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in _data(2, 4):
        training(x, y)
        optimizer.zero_grad()
        reference(x, y)[1].backward()
        optimizer.step()
        statistics = emulated.norm.running_mean.clone()
        reference.eval()
        expected = reference(x, y)[0].detach()
        reference.train()
        np.testing.assert_allclose(inference(x, y)[0].numpy(), expected.numpy(), atol=1e-5)
        assert torch.equal(emulated.norm.running_mean, statistics)
    _assert_state_close(emulated, reference)


class _Nested(_ConvNet):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple:  # type: ignore[override]
        out, loss = super().forward(x, y)
        return (out, out.sum(1)), loss


def test_nested_outputs_come_back_in_their_structure() -> None:
    training = poptorch.trainingModel(_Nested(), poptorch.Options().deviceIterations(2))
    (logits, sums), loss = training(*_data(1, 8)[0])
    assert logits.shape == (4, 3) and sums.shape == (4,) and loss.ndim == 0


def test_a_refused_model_stays_refused() -> None:
    refused = poptorch.trainingModel(_Tally(), poptorch.Options().replicationFactor(2))
    for _ in range(2):
        with pytest.raises(ValueError, match=r"broadcastBuffers\(False\)"):
            refused(torch.ones(4, 2))


@pytest.mark.parametrize(
    "norm",
    [
        lambda: torch.nn.BatchNorm1d(4, momentum=None),
        lambda: torch.nn.InstanceNorm1d(4, track_running_stats=True),
    ],
)
def test_norms_whose_statistics_are_not_kept_are_refused_in_one_line(norm: object) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), norm())  # type: ignore[operator]
    with pytest.raises(ValueError, match="poptorch: 1 is") as info:
        poptorch.trainingModel(model, poptorch.Options())
    assert "\n" not in str(info.value)
