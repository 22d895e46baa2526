"""The loader: layout-free step batches, no repeats or drops within an epoch."""

import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract import layout_environment
from hardware import ReplicaLayout
from popdist_emu import Options, ReplicaLoader


def instance_env(layout: ReplicaLayout, instance: int):
    """The environment poprun-emu gives ``instance`` (for emulating it in one process)."""
    return mock.patch.dict(os.environ, layout_environment(layout, instance))


def dataset(n: int) -> tuple[np.ndarray, np.ndarray]:
    # The sample's value is its index, so batches show which samples they hold.
    return np.arange(n, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32), np.arange(n)


def job_indices(num_replicas, num_instances, micro, ga, step, n=50, seed=3):
    """One step's sample indices of every replica, assembled from all instances' loaders."""
    layout = ReplicaLayout(num_replicas=num_replicas, num_instances=num_instances)
    parts = []
    for i in range(num_instances):
        with instance_env(layout, i):
            opts = Options(gradient_accumulation=ga)
            loader = ReplicaLoader(dataset(n), micro, opts, seed=seed)
            images, labels = loader.step_batch(step)
            assert images.shape == (ga, layout.num_local_replicas, micro, 3)
            np.testing.assert_array_equal(images[..., 0], labels)
            parts.append(labels)
    return np.concatenate(parts, axis=1)  # [GA, replicas, micro]


@given(
    replicas=st.sampled_from([1, 2, 4, 8]),
    micro=st.integers(1, 5),
    step=st.integers(0, 12),
    instance_power=st.integers(0, 3),
)
def test_same_samples_for_any_layout(replicas, micro, step, instance_power):
    instances = min(2**instance_power, replicas)
    reference = job_indices(replicas, instances, micro, 1, step).ravel()
    # R replicas x micro-batch b == 1 replica x GA R == 1 replica x micro-batch R*b.
    np.testing.assert_array_equal(job_indices(replicas, 1, micro, 1, step).ravel(), reference)
    np.testing.assert_array_equal(job_indices(1, 1, micro, replicas, step).ravel(), reference)
    np.testing.assert_array_equal(job_indices(1, 1, micro * replicas, 1, step).ravel(), reference)


@given(n=st.integers(1, 60), micro=st.integers(1, 7), ga=st.integers(1, 3), seed=st.integers(0, 9))
def test_every_sample_once_per_epoch(n, micro, ga, seed):
    loader = ReplicaLoader(
        dataset(n), micro, Options(replication_factor=2, gradient_accumulation=ga), seed=seed
    )
    g = loader.global_batch_size
    steps = -(-3 * n // g)  # covers three epochs
    stream = np.concatenate([loader.global_indices(t).ravel() for t in range(steps)])
    for epoch in range(3):
        assert sorted(stream[epoch * n : (epoch + 1) * n]) == list(range(n))
    # Epochs are shuffled differently (for more than a handful of samples).
    if n >= 10:
        assert not np.array_equal(stream[:n], stream[n : 2 * n])


def test_batch_stacks_device_iterations():
    opts = Options(replication_factor=2, gradient_accumulation=3, device_iterations=4)
    loader = ReplicaLoader(dataset(40), 2, opts, seed=1)
    images, labels = loader.batch(call=1)
    assert images.shape == (4, 3, 2, 2, 3) and labels.shape == (4, 3, 2, 2)
    for d in range(4):
        np.testing.assert_array_equal(labels[d], loader.step_batch(4 + d)[1])


def test_batch_is_a_pure_function_of_the_step():
    loader = ReplicaLoader(dataset(30), 3, Options(replication_factor=2), seed=5)
    later = loader.step_batch(7)[1]
    for t in range(7):
        loader.step_batch(t)
    np.testing.assert_array_equal(loader.step_batch(7)[1], later)


def test_mismatched_array_lengths_fail_clearly():
    with pytest.raises(ValueError, match="same length on axis 0"):
        ReplicaLoader((np.zeros(5), np.zeros(6)), 1, Options(replication_factor=1))


def test_bad_micro_batch_size_fails_clearly():
    with pytest.raises(ValueError, match="`micro_batch_size` must be at least 1"):
        ReplicaLoader(dataset(5), 0, Options(replication_factor=1))
