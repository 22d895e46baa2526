"""``enableSyntheticData(True)`` (``_synthetic``): device-made inputs, no host IO."""

from __future__ import annotations

import torch

import popdist_emu.poptorch as poptorch
from popdist_emu.poptorch._synthetic import synthetic_inputs


class _Echo(torch.nn.Module):
    """Returns what it was fed (so the test sees the device's inputs) and a loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(3, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.fc(x)
        return x, y, torch.nn.functional.cross_entropy(logits, y)


def _host() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((4, 3), 5.0), torch.tensor([1, 3, 2, 3])


def _trained(synthetic: bool) -> poptorch.PoplarExecutor:
    opts = poptorch.Options().randomSeed(7).enableSyntheticData(synthetic)
    return poptorch.trainingModel(_Echo(), opts)


def test_the_device_makes_the_inputs() -> None:
    model = _trained(synthetic=True)
    seen_x, seen_y, loss = model(*_host())
    made_x, made_y = synthetic_inputs(_host(), 7, 0, 0)
    assert seen_x.dtype == torch.float32 and seen_x.shape == (4, 3)
    assert not torch.equal(seen_x, _host()[0])  # not the host's values
    torch.testing.assert_close(seen_x, made_x)
    assert made_y.dtype == torch.int64 and torch.equal(seen_y.long(), made_y)
    assert int(seen_y.min()) >= 1 and int(seen_y.max()) <= 3  # the labels' range
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(_Echo().fc(made_x), made_y))
    # Another call, other inputs; the same seed, the same inputs.
    assert not torch.equal(model(*_host())[0], seen_x)
    torch.testing.assert_close(_trained(synthetic=True)(*_host())[0], seen_x)


def test_the_simulated_step_has_no_host_io() -> None:
    synthetic, host = _trained(synthetic=True), _trained(synthetic=False)
    for model in (synthetic, host):
        model(*_host())
    with_io, without = host._programs.latest, synthetic._programs.latest
    assert with_io is not None and without is not None
    assert with_io.profile.host_bytes_per_micro_batch > 0 and with_io.host_io_seconds > 0
    assert without.profile.host_bytes_per_micro_batch == 0
    assert without.profile.host_output_bytes_per_micro_batch == 0
    assert without.host_io_seconds == 0.0
