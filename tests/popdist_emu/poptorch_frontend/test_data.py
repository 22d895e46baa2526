"""``poptorch.DataLoader``'s calls beyond torch's: ``terminate``, and what it costs the host.

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

import popdist_emu.poptorch as poptorch  # noqa: E402


def test_terminate_ends_the_workers_and_a_later_epoch_starts_them_again() -> None:
    """Graphcore's CNN training calls ``train_data.terminate()`` after training."""
    dataset = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(4, 2))
    loader = poptorch.DataLoader(
        poptorch.Options(),
        dataset,
        batch_size=2,
        num_workers=1,
        persistent_workers=True,
        mode=poptorch.DataLoaderMode.AsyncRebatched,
    )
    first = [batch[0].tolist() for batch in loader]
    workers = loader._iterator._workers  # type: ignore[attr-defined]  # torch's processes
    assert workers and all(w.is_alive() for w in workers)
    loader.terminate()
    assert not any(w.is_alive() for w in workers)
    assert [batch[0].tolist() for batch in loader] == first
    loader.terminate()


class _Counted(torch.utils.data.Dataset):
    """Counts the samples this process prepares (a worker's count stays in the worker)."""

    calls = 0

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> torch.Tensor:
        _Counted.calls += 1
        return torch.full((2,), float(i))


def test_a_loader_with_workers_is_measured_once_before_they_start() -> None:
    """The host's cost per sample is measured in this process before the first iteration
    forks the workers, whose CPU would otherwise share the measurement's cores; reading it
    later measures nothing again."""
    _Counted.calls = 0
    loader = poptorch.DataLoader(poptorch.Options(), _Counted(), batch_size=2, num_workers=2)
    assert _Counted.calls == 0
    batches = [batch.tolist() for batch in loader]
    assert len(batches) == 6 and _Counted.calls == 12  # the probe's 12, none of the workers'
    cost = loader.host_cost()
    assert _Counted.calls == 12 and cost.workers == 2 and cost.cpu_seconds_per_sample > 0
    assert loader.host_cost() == cost
