"""The host's share of a step: data preparation on the POD's host servers, overlapped with the
IPUs as far as the loader's prefetch allows, and host-bound steps reported as such."""

import dataclasses

import pytest
from host_profiles import POD16, SMALL
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware
from hardware._parameters import HOST_CORES


def _simulate(profile, layout=None, **kw):
    layout = layout or hardware.ReplicaLayout(4, 2)
    return hardware.simulate_step(profile, layout, POD16, **kw)


@pytest.mark.parametrize(("replicas", "hosts"), [(16, 1), (64, 4), (128, 8), (256, 16)])
def test_one_host_per_16_ipus_as_in_graphcores_mlperf_systems(replicas, hosts):
    layout = hardware.ReplicaLayout(replicas, replicas // 2)  # the ResNet-50 launch lines
    assert hardware.host_servers(layout) == hosts


def test_named_hosts_count_and_never_more_hosts_than_instances():
    assert hardware.host_servers(hardware.ReplicaLayout(8, 4, hosts=("a", "b", "c", "d"))) == 4
    assert hardware.host_servers(hardware.ReplicaLayout(64, 2)) == 2


def test_an_unmeasured_host_changes_nothing():
    plain = _simulate(SMALL)
    assert plain.phases["host_compute"] == 0 and plain.host_compute_seconds == 0
    assert not plain.host_bound
    assert plain.host_bound_samples_per_second == float("inf")


def test_a_slow_loader_makes_the_step_host_bound():
    ipu = _simulate(SMALL)
    per_sample = 4 * ipu.simulated_step_seconds / (2 * 16 * 4)  # 4x the IPU step per step
    slow = _simulate(dataclasses.replace(SMALL, host_cpu_seconds_per_sample=per_sample))
    host = slow.host_compute_seconds
    assert host == pytest.approx(4 * ipu.simulated_step_seconds)
    # Prefetched: the host's time per step decides, the IPU work hides behind it.
    assert slow.simulated_step_seconds == pytest.approx(host, rel=1e-9)
    assert slow.host_bound
    assert slow.phases["host_compute"] == pytest.approx(
        slow.simulated_step_seconds - ipu.simulated_step_seconds
    )
    assert slow.samples_per_second == pytest.approx(slow.host_bound_samples_per_second)
    assert slow.ipu_bound_samples_per_second == pytest.approx(ipu.samples_per_second)
    assert any(e.name == "host_compute" for e in slow.events)


def test_a_loader_between_calls_adds_its_whole_time():
    ipu = _simulate(SMALL)
    per_sample = 0.5 * ipu.simulated_step_seconds / (2 * 16 * 4)
    profile = dataclasses.replace(SMALL, host_cpu_seconds_per_sample=per_sample)
    ahead = _simulate(profile)
    between = _simulate(dataclasses.replace(profile, host_prefetch=False))
    assert ahead.simulated_step_seconds == pytest.approx(ipu.simulated_step_seconds)
    assert not ahead.host_bound and ahead.phases["host_compute"] == pytest.approx(0, abs=1e-12)
    # In series; the first micro-batch's host IO now waits for the data as well.
    assert between.simulated_step_seconds == pytest.approx(
        ipu.simulated_step_seconds + between.host_compute_seconds, rel=1e-3
    )
    assert between.phases["host_compute"] == pytest.approx(
        between.simulated_step_seconds - ipu.simulated_step_seconds
    )


def test_workers_share_the_work_up_to_the_instances_cores():
    profile = dataclasses.replace(SMALL, host_cpu_seconds_per_sample=1e-4)
    layout = hardware.ReplicaLayout(16, 1)  # one instance: a whole host's cores
    one = hardware.host_compute_seconds(profile, layout)
    four = hardware.host_compute_seconds(dataclasses.replace(profile, host_workers=4), layout)
    many = dataclasses.replace(profile, host_workers=10 * HOST_CORES)
    assert four == pytest.approx(one / 4)
    assert hardware.host_compute_seconds(many, layout) == pytest.approx(one / HOST_CORES)
    # 16 instances on the POD16's one host: 8 cores each.
    crowded = hardware.ReplicaLayout(16, 16)
    per_instance = one / 16  # one replica's samples instead of sixteen
    assert hardware.host_compute_seconds(many, crowded) == pytest.approx(per_instance / 8)


@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    scale=st.floats(0.0, 10.0),
    prefetch=st.booleans(),
    depth=st.integers(0, 4),
    workers=st.integers(0, 8),
)
def test_the_step_lies_between_the_slower_lane_and_both_in_series(scale, prefetch, depth, workers):
    ipu = _simulate(SMALL, prefetch_depth=depth)
    per_sample = scale * ipu.simulated_step_seconds / (2 * 16 * 4)
    profile = dataclasses.replace(
        SMALL, host_cpu_seconds_per_sample=per_sample, host_prefetch=prefetch, host_workers=workers
    )
    sim = _simulate(profile, prefetch_depth=depth)
    host, step = sim.host_compute_seconds, sim.simulated_step_seconds
    assert step >= max(host, ipu.simulated_step_seconds) * (1 - 1e-9)
    # In series at worst; waiting for the data can expose host IO the prefetch hid before.
    assert step <= (host + ipu.simulated_step_seconds + sim.host_io_seconds) * (1 + 1e-9)
    assert sim.phases["host_compute"] == pytest.approx(step - ipu.simulated_step_seconds, abs=1e-12)


def test_bad_host_figures_are_refused_in_one_line():
    with pytest.raises(ValueError, match="host_cpu_seconds_per_sample"):
        dataclasses.replace(SMALL, host_cpu_seconds_per_sample=-1.0)
    with pytest.raises(ValueError, match="host_workers"):
        dataclasses.replace(SMALL, host_workers=-2)
