"""A data loader whose step batches depend on the seed and the step only, never the layout.

The dataset is read as an endless stream of seeded per-epoch permutations. Step ``t`` takes
the stream positions ``[t*G, (t+1)*G)`` (``G`` the global batch) laid out as
``[gradient_accumulation, total_replicas, micro_batch]`` in C order, and each instance cuts
out only its own replicas. So ``R`` replicas x micro-batch ``b``, one replica with gradient
accumulation ``R`` and one replica with micro-batch ``R*b`` see the same samples in the same
order, and within an epoch no sample repeats or is dropped.

Every batch is a pure function of the step, so a host-IO infeed may call it from worker
threads, in any order.

References:
    PopART glossary, input layout ``[batches_per_step, accl_factor, repl_factor,
    micro_batch, *sample]``; PopDist guide, sharding a dataset by instance.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from popdist_emu._options import Options


@functools.lru_cache(maxsize=8)
def _epoch_permutation(seed: int, epoch: int, num_samples: int) -> np.ndarray:
    # Seeded by (seed, epoch) so any epoch is reachable without drawing the earlier ones.
    perm = np.random.default_rng((seed, epoch)).permutation(num_samples)
    perm.flags.writeable = False
    return perm


def stream_indices(seed: int, num_samples: int, start: int, stop: int) -> np.ndarray:
    """Dataset indices at stream positions ``[start, stop)`` of the seeded epoch stream."""
    positions = np.arange(start, stop)
    epochs = positions // num_samples
    out = np.empty(positions.shape, dtype=np.int64)
    for epoch in np.unique(epochs):
        mask = epochs == epoch
        out[mask] = _epoch_permutation(seed, int(epoch), num_samples)[positions[mask] % num_samples]
    return out


class ReplicaLoader:
    """Cuts each step's global batch out of a dataset for this instance's replicas.

    Args:
        arrays: the dataset, a sequence (or tuple-like) of arrays with the same length on
            axis 0, e.g. ``(images, labels)``; batches come back as a tuple in that order.
        micro_batch_size: samples per replica per micro-batch.
        options: the training options (replicas, accumulation, device iterations).
        seed: the stream's seed; the same seed gives the same samples for any layout.
    """

    def __init__(
        self,
        arrays: Sequence[npt.ArrayLike],
        micro_batch_size: int,
        options: Options,
        *,
        seed: int = 0,
    ) -> None:
        loaded = tuple(np.asarray(a) for a in arrays)
        if not loaded:
            raise ValueError("ReplicaLoader: `arrays` is empty; pass e.g. (images, labels).")
        lengths = {a.shape[0] if a.ndim else None for a in loaded}
        if len(lengths) != 1 or None in lengths:
            raise ValueError(
                f"ReplicaLoader: every array in `arrays` needs the same length on axis 0, got "
                f"shapes {[a.shape for a in loaded]}; slice them to one sample count."
            )
        if isinstance(micro_batch_size, bool) or not isinstance(micro_batch_size, int):
            raise ValueError(
                f"ReplicaLoader: `micro_batch_size` must be an int, got {micro_batch_size!r}."
            )
        if micro_batch_size < 1:
            raise ValueError(
                f"ReplicaLoader: `micro_batch_size` must be at least 1, got {micro_batch_size}."
            )
        self.arrays = loaded
        self.num_samples = loaded[0].shape[0]
        self.micro_batch_size = micro_batch_size
        self.options = options
        self.seed = int(seed)
        self.num_total_replicas = options.num_total_replicas
        self.replica_offset = options.replica_offset

    @property
    def global_batch_size(self) -> int:
        """Samples per optimiser step over all replicas."""
        return self.options.global_batch_size(self.micro_batch_size)

    @property
    def steps_per_epoch(self) -> float:
        """Optimiser steps per pass over the dataset (fractional when it does not divide)."""
        return self.num_samples / self.global_batch_size

    def global_indices(self, step: int) -> np.ndarray:
        """Dataset indices of step ``step`` for all replicas, ``[GA, total_replicas, mb]``."""
        if step < 0:
            raise ValueError(f"ReplicaLoader: `step` must be >= 0, got {step}.")
        g = self.global_batch_size
        idx = stream_indices(self.seed, self.num_samples, step * g, (step + 1) * g)
        return idx.reshape(
            self.options.gradient_accumulation, self.num_total_replicas, self.micro_batch_size
        )

    def local_indices(self, step: int) -> np.ndarray:
        """Dataset indices of this instance's replicas at ``step``, ``[GA, local, mb]``."""
        lo = self.replica_offset
        return self.global_indices(step)[:, lo : lo + self.options.replication_factor]

    def step_batch(self, step: int) -> tuple[np.ndarray, ...]:
        """This instance's micro-batches of one step, each array ``[GA, local, mb, *sample]``."""
        idx = self.local_indices(step)
        return tuple(a[idx] for a in self.arrays)

    def batch(self, call: int) -> tuple[np.ndarray, ...]:
        """The input of one :meth:`Trainer.step` call (``device_iterations`` steps).

        Each array is ``[device_iterations, GA, local, mb, *sample]`` and holds steps
        ``call * device_iterations`` onwards.
        """
        di = self.options.device_iterations
        idx = np.stack([self.local_indices(call * di + d) for d in range(di)])
        return tuple(a[idx] for a in self.arrays)
