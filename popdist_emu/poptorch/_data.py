"""``poptorch.DataLoader``: combined batches, each instance its share of the job's data.

One call of a PopTorch model takes the combined batch ``batch_size x device_iterations x
gradient_accumulation x local replicas``. Here every instance draws the job's global combined
batch (over all replicas) from the same sample order, seen as ``[device_iterations,
accumulation, total replicas, batch_size]``, and keeps its own replicas' slice: replica ``r``
sees the same samples whatever the instance layout, so the training's numbers do not depend on
it (PopTorch partitions the dataset by process instead, which changes the data order with the
layout). Shuffling draws one permutation per epoch from ``torch.Generator`` seeded with the
options' ``randomSeed`` (0 when unset) and the epoch, the same on every instance.

References:
    PopTorch User Guide, "Efficient data batching" (``poptorch.DataLoader``, combined batch
    size, ``drop_last``, ``DataLoaderMode``) and "Distributed execution" (each process its
    part of the data).
"""

from __future__ import annotations

import itertools
import random
import re
import time
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sized
from typing import Any, NamedTuple, cast

import numpy as np
import torch
import torch.utils.data

import hardware
from popdist_emu.popdist import PopTorchOptions
from popdist_emu.poptorch._api import DataLoaderMode

# The data loader that gave the program its latest batch (the one the model is then called
# with), for the host-side cost of the simulated step.
_ACTIVE: list[weakref.ref] = []
# JAX's warning at every os.fork() once its threads run (``jax._src.xla_bridge``), and
# whether the note that replaces it was given.
_JAX_FORK = r"os\.fork\(\) was called"
_NOTED: list[str] = []
# Samples prepared to measure a loader's cost per sample (a few calls' worth at most).
PROBE_SAMPLES = 256


class HostCost(NamedTuple):
    """What a loader costs the host, for ``hardware.StepProfile``'s host fields.

    Attributes:
        cpu_seconds_per_sample: CPU time of preparing one sample (its ``dataset[i]`` and
            its share of the collation), measured in this process.
        workers: processes preparing samples in parallel (``num_workers``, at least 1).
        prefetch: whether samples are prepared while the IPUs run (worker processes, or
            PopTorch's asynchronous modes), rather than between calls.
        relative_spread: the spread of the batches' costs per sample
            (``hardware.relative_spread``: the scaled MAD over the median), which the band of
            a host-bound prediction carries.
    """

    cpu_seconds_per_sample: float
    workers: int
    prefetch: bool
    relative_spread: float = 0.0


class _CombinedBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Index lists of this instance's part of each global combined batch."""

    def __init__(self, size: int, options: PopTorchOptions, batch_size: int, shuffle: bool) -> None:
        emu = options.to_options()
        self.shape = (
            emu.device_iterations,
            emu.gradient_accumulation,
            emu.num_total_replicas,
            batch_size,
        )
        self.local = slice(emu.replica_offset, emu.replica_offset + emu.replication_factor)
        self.global_size = int(np.prod(self.shape))
        self.size, self.shuffle = size, shuffle
        self.seed = options.random_seed or 0
        self.epoch = 0
        self.batches = size // self.global_size

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[list[int]]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=generator).numpy()
        else:
            order = np.arange(self.size)
        self.epoch += 1
        for b in range(self.batches):
            chunk = order[b * self.global_size : (b + 1) * self.global_size]
            yield chunk.reshape(self.shape)[:, :, self.local].ravel().tolist()


class DataLoader(torch.utils.data.DataLoader):
    """``poptorch.DataLoader(options, dataset, batch_size=1, shuffle=False, ...)``.

    Args:
        options: the ``poptorch.Options`` the model runs with.
        dataset: a map-style ``torch.utils.data.Dataset``, or an
            ``IterableDataset`` that gives each instance its own samples (PopTorch batches
            it by the instance's combined batch; ``auto_distributed_partitioning=False``).
        batch_size: the micro-batch of one replica.
        shuffle: a new sample order every epoch (the same on every instance).
        num_workers: worker processes, as ``torch.utils.data.DataLoader``'s.
        drop_last: drop the samples that do not fill a global combined batch; False is
            accepted only when they fill it exactly.
        persistent_workers: as torch's (None: True when there are workers).
        auto_distributed_partitioning: True for a map-style dataset (each instance its
            share), False for an iterable one (it shards itself), as PopTorch requires.
        mode: ``poptorch.DataLoaderMode``; every mode loads synchronously here.
        async_options: accepted (no effect).
        rebatched_worker_size: accepted (no effect).
        **kwargs: passed to ``torch.utils.data.DataLoader`` (``collate_fn``, ...).

    Raises:
        ValueError: the dataset holds less than one global combined batch, or does not
            divide into them while ``drop_last`` is False.
    """

    def __init__(
        self,
        options: PopTorchOptions,
        dataset: torch.utils.data.Dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        num_workers: int = 0,
        drop_last: bool = True,
        persistent_workers: bool | None = None,
        auto_distributed_partitioning: bool = True,
        mode: DataLoaderMode | None = None,
        async_options: Mapping[str, object] | None = None,
        rebatched_worker_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.options = options
        self._asynchronous = mode in (DataLoaderMode.Async, DataLoaderMode.AsyncRebatched)
        self._cost: HostCost | None = None  # measured before the first workers start
        self._micro_batch_size = int(batch_size)
        persistent = bool(num_workers) if persistent_workers is None else persistent_workers
        if isinstance(dataset, torch.utils.data.IterableDataset):
            # PopTorch: the dataset gives each process (and worker) its own samples, and
            # the loader batches them by this instance's combined batch.
            if auto_distributed_partitioning:
                raise ValueError(
                    "poptorch.DataLoader: an IterableDataset shards itself across the "
                    "instances (popdist.getInstanceIndex()), as PopTorch requires: pass "
                    "auto_distributed_partitioning=False."
                )
            emu = options.to_options()
            self._combined_batch_size = int(batch_size) * (
                emu.device_iterations * emu.gradient_accumulation * emu.replication_factor
            )
            super().__init__(
                dataset,
                batch_size=self._combined_batch_size,
                drop_last=drop_last,
                num_workers=num_workers,
                persistent_workers=persistent,
                **kwargs,
            )
            return
        if not auto_distributed_partitioning:
            raise ValueError(
                "poptorch.DataLoader(auto_distributed_partitioning=False): popdist-emu gives "
                "each instance its share of a map-style dataset itself; leave it True."
            )
        size = len(cast(Sized, dataset))  # a map-style dataset has a length
        sampler = _CombinedBatchSampler(size, options, int(batch_size), bool(shuffle))
        _check_size(size, sampler, drop_last)
        self._combined_batch_size = (
            sampler.global_size // sampler.shape[2] * (sampler.local.stop - sampler.local.start)
        )
        super().__init__(
            dataset,
            batch_sampler=sampler,
            num_workers=num_workers,
            persistent_workers=persistent,
            **kwargs,
        )

    def __iter__(self) -> Any:  # a generator, where torch's says its iterator class
        """torch's iteration, remembering this loader as the one that fed the latest batch.

        Worker processes start here, forked from a process where JAX runs threads: JAX
        warns at every such fork that it "will likely lead to a deadlock". The workers run
        only the dataset and the collation (torch and Python, as PopTorch's workers do),
        never JAX, whose threads are what a fork leaves behind; so the warning is replaced
        by one note saying so (``_quiet_fork``).
        """
        if self.num_workers > 0 and self._cost is None:
            self._cost = self.host_cost()  # before the workers share this machine's CPUs
        with warnings.catch_warnings(record=True) as caught:
            warnings.filterwarnings("always", message=_JAX_FORK, category=RuntimeWarning)
            iterator = super().__iter__()
        _quiet_fork(caught, self.num_workers)
        for batch in iterator:
            _ACTIVE[:] = [weakref.ref(self)]
            yield batch

    def host_cost(self, samples: int = PROBE_SAMPLES) -> HostCost:
        """Measures what preparing a sample costs the host: the first ``samples`` of the
        dataset read and collated in batches of ``batch_size``, timed in CPU seconds of this
        thread (so waiting for a crowded machine's CPU is not counted); the sampler is not
        touched. A loader with worker processes is measured once, before its first
        iteration starts them: a thread's CPU time still grows while other processes share
        its core (its own workers, on a machine with fewer cores than workers), and a POD's
        host has the cores its workers need. The cost is the least of the batches' costs
        per sample, the timing that such noise and first calls' one-time work inflate least
        (Python's ``timeit`` documentation, https://docs.python.org/3/library/timeit.html).
        The batches' scatter is kept too (``hardware.relative_spread``): it is this machine's
        noise while measuring, which moves the figure from one run to the next."""
        if self._cost is not None and samples == PROBE_SAMPLES:
            return self._cost
        if isinstance(self.dataset, torch.utils.data.IterableDataset):
            costs = _iterable_costs(self, samples)
        else:
            size = len(cast(Sized, self.dataset))
            count = max(min(samples, size), 1)
            sampler = cast(_CombinedBatchSampler, self.batch_sampler)
            per_batch = max(sampler.shape[-1], 1)
            costs = []
            for first in range(0, count, per_batch):
                indices = range(first, min(first + per_batch, count))
                began = time.thread_time()
                self.collate_fn([self.dataset[i] for i in indices])
                costs.append((time.thread_time() - began) / len(indices))
        if not costs:  # an iterable dataset that gave nothing: not measured
            return HostCost(0.0, max(self.num_workers, 1), self._asynchronous)
        return HostCost(
            min(costs),
            max(self.num_workers, 1),
            self._asynchronous or self.num_workers > 0,
            hardware.relative_spread(costs),
        )

    def terminate(self) -> None:
        """PopTorch's ``DataLoader.terminate()``: ends the loader's worker processes (the
        asynchronous mode's worker in PopTorch; here torch's persistent workers), which a
        later iteration starts again. Graphcore's CNN training calls it after training."""
        iterator = getattr(self, "_iterator", None)  # torch's persistent-workers iterator
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        self._iterator = None

    @property
    def combinedBatchSize(self) -> int:  # noqa: N802
        """Samples of one call on this instance (PopTorch's ``combinedBatchSize``)."""
        return self._combined_batch_size


def _iterable_costs(loader: DataLoader, samples: int) -> list[float]:
    """CPU seconds per sample of the first ``samples`` of an iterable dataset, read from a
    fresh iterator in this process in batches of the loader's micro-batch and collated. The
    global random states an iterator may draw from (a dataset that shuffles its files with
    NumPy's) are put back afterwards, so the program's own iteration is unchanged."""
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    per_batch = max(loader._micro_batch_size, 1)
    costs: list[float] = []
    try:
        items = iter(loader.dataset)
        for _ in range(0, max(samples, 1), per_batch):
            began = time.thread_time()
            batch = list(itertools.islice(items, per_batch))
            if not batch:
                break
            loader.collate_fn(batch)
            costs.append((time.thread_time() - began) / len(batch))
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
    return costs


def _quiet_fork(caught: list[warnings.WarningMessage], workers: int) -> None:
    """Passes on the warnings starting the workers raised, JAX's fork warning as one note."""
    forked = False
    for w in caught:
        if issubclass(w.category, RuntimeWarning) and re.match(_JAX_FORK, str(w.message)):
            forked = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if forked and not _NOTED:
        _NOTED.append("fork")
        warnings.warn(
            f"poptorch.DataLoader: its {workers} worker process(es) are forked from this "
            "process, where JAX runs threads; the workers run only the dataset and its "
            "collation, never JAX, so JAX's warning that os.fork() 'will likely lead to a "
            "deadlock' does not apply and is not shown (a dataset that calls JAX itself "
            "needs multiprocessing_context='spawn')",
            stacklevel=3,
        )


def _check_size(size: int, sampler: _CombinedBatchSampler, drop_last: bool) -> None:
    """Refuses a dataset that makes no global combined batch (whatever ``drop_last``), or
    whose last batch ``drop_last=False`` would keep incomplete, naming both numbers.

    Raises:
        ValueError: either case, in one line with the sizes that make the batch.
    """
    iterations, accumulation, replicas, batch = sampler.shape
    made_of = (
        f"batch_size {batch} x deviceIterations {iterations} x gradientAccumulation "
        f"{accumulation} x {replicas} replica(s) over all instances"
    )
    if sampler.batches == 0:
        raise ValueError(
            f"poptorch.DataLoader: the dataset holds {size} samples, fewer than one global "
            f"combined batch of {sampler.global_size} ({made_of}), so it gives no batch: use "
            f"a smaller batch_size or smaller counts in the options, or a larger dataset."
        )
    if not drop_last and size % sampler.global_size:
        raise ValueError(
            f"poptorch.DataLoader(drop_last=False): the dataset's {size} samples leave "
            f"{size % sampler.global_size} over after whole global combined batches of "
            f"{sampler.global_size} ({made_of}), which popdist-emu does not run as a short "
            f"last batch: pass drop_last=True (PopTorch's default) or resize the dataset."
        )


def active_loader() -> DataLoader | None:
    """The ``poptorch.DataLoader`` that gave the program its latest batch, or None.

    Programs build one ``poptorch.Options`` for the loader and another for the model, so
    the loader is found by what fed the call rather than by its options.
    """
    loader = _ACTIVE[0]() if _ACTIVE else None
    return loader if isinstance(loader, DataLoader) else None
