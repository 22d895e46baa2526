"""``poptorch.DataLoader``'s calls beyond torch's: ``terminate``.

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
