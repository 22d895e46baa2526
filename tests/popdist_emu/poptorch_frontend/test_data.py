"""``poptorch.DataLoader``'s calls beyond torch's: ``terminate``, and what it costs the host.

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from deadlines import within
from poprun_beside import run_program

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


class _Stream(torch.utils.data.IterableDataset):
    """Samples ``0, 1, 2...`` of this instance's shard (every ``instances``-th, from its
    index), shuffling a list with NumPy's global generator at each new iterator, as
    Graphcore's BERT shuffles its files."""

    def __init__(self, size: int, instance: int = 0, instances: int = 1) -> None:
        self.size, self.instance, self.instances = size, instance, instances

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        np.random.shuffle([0, 1, 2])
        for i in range(self.instance, self.size, self.instances):
            yield torch.tensor([float(i)])


def test_an_iterable_dataset_is_batched_by_the_instance_s_combined_batch() -> None:
    """PopTorch: an ``IterableDataset`` shards itself, and the loader batches what it gives
    by batch_size x deviceIterations x gradientAccumulation x local replicas."""
    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(3)
    loader = poptorch.DataLoader(
        opts, _Stream(24), batch_size=2, auto_distributed_partitioning=False
    )
    assert loader.combinedBatchSize == 12
    batches = [batch[:, 0].tolist() for batch in loader]
    assert batches == [list(map(float, range(12))), list(map(float, range(12, 24)))]


def test_an_iterable_dataset_must_shard_itself_as_poptorch_requires() -> None:
    with pytest.raises(ValueError, match="pass auto_distributed_partitioning=False") as caught:
        poptorch.DataLoader(poptorch.Options(), _Stream(8))
    assert "\n" not in str(caught.value)


def test_measuring_an_iterable_dataset_leaves_the_program_s_random_state() -> None:
    loader = poptorch.DataLoader(
        poptorch.Options(), _Stream(8), batch_size=2, auto_distributed_partitioning=False
    )
    np.random.seed(5)
    before = np.random.get_state()[1].copy()
    cost = loader.host_cost()
    assert cost.cpu_seconds_per_sample > 0
    assert (np.random.get_state()[1] == before).all()


ITERABLE_PROGRAM = """
import json, popdist, torch
import popdist_emu.poptorch as poptorch


class Shard(torch.utils.data.IterableDataset):
    def __len__(self):
        return 16

    def __iter__(self):
        me, n = popdist.getInstanceIndex(), popdist.getNumInstances()
        for i in range(me, 16, n):
            yield torch.full((2,), float(i)), torch.tensor(i % 2)


opts = poptorch.Options()
opts.Training.gradientAccumulation(2)
loader = poptorch.DataLoader(opts, Shard(), batch_size=2, auto_distributed_partitioning=False)
model = torch.nn.Linear(2, 2)


class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        out = self.model(x)
        return out, torch.nn.functional.cross_entropy(out, y)


training = poptorch.trainingModel(WithLoss(), opts, torch.optim.SGD(model.parameters(), lr=0.1))
for x, y in loader:
    training(x, y)
    print("batch", json.dumps([popdist.getInstanceIndex(), x[:, 0].tolist()]), flush=True)
"""


def test_each_instance_trains_on_its_own_shard_of_an_iterable_dataset(tmp_path: Path) -> None:
    """Graphcore's BERT reads its records as an IterableDataset that shards itself by
    instance; under ``poprun-emu`` on 2 instances each trains on its half."""
    options = ("--num-instances", "2", "--num-replicas", "2")
    out = run_program(tmp_path, "shards.py", ITERABLE_PROGRAM, *options, timeout=within(300))
    seen: dict[int, list[float]] = {0: [], 1: []}
    for line in out.stdout.splitlines():
        if "batch " in line:
            instance, values = json.loads(line.split("batch ", 1)[1])
            seen[instance] += values
    assert seen == {0: [float(i) for i in range(0, 16, 2)], 1: [float(i) for i in range(1, 16, 2)]}
