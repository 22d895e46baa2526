"""Simulated collective times against the closed-form alpha-beta formulas."""

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hardware

PARAMS = hardware.ModelParameters(
    compute_efficiency=0.2, ipu_link_latency=3e-6, gw_link_latency=2e-4, host_sync_seconds=0.0
)
B_IPU = 32e9  # GC200 IPU-Link, bytes/s per direction
B_GW = 2 * 12.5e9 / 4  # an M2000's two GW-Links shared by its 4 IPUs
N = 100e6


def ring_closed_form(kind, method, p, n, b, a):
    """The formulas of the hardware._collectives docstring, written out independently."""
    if p == 1:
        return 0.0
    phases = 2 if kind in ("all_reduce", "broadcast") else 1
    if method in ("clockwise_ring", "anticlockwise_ring"):
        return phases * (p - 1) * (a + n / p / b)
    if method == "bidirectional_ring_pair":
        return phases * (p - 1) * (a + n / 2 / p / b)
    if method == "meet_in_middle_ring":
        return phases * math.ceil((p - 1) / 2) * (a + n / p / b)
    raise AssertionError(method)


METHODS = ("clockwise_ring", "anticlockwise_ring", "bidirectional_ring_pair", "meet_in_middle_ring")
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def time_of(kind, method, group, replicas, system, ipus_per_replica=1, n=N):
    layout = hardware.ReplicaLayout(replicas, 1, ipus_per_replica)
    record = hardware.CollectiveRecord(kind, method, group, n)
    return hardware.collective_time(record, layout, hardware.get_system(system), PARAMS)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", KINDS)
def test_flat_ring_inside_a_pod64_is_the_closed_form(kind, method):
    t = time_of(kind, method, "all", 64, "pod64")
    assert t.gw_links == 0.0
    assert t.ipu_links == pytest.approx(ring_closed_form(kind, method, 64, N, B_IPU, 3e-6))


@pytest.mark.parametrize("method", METHODS)
def test_all_reduce_across_pods_is_hierarchical(method):
    # pod256: 4 IPU-Link domains of 64; reduce-scatter and all-gather inside each,
    # all-reduce of the 1/64 shards across the 4 Pods over GW-Links.
    t = time_of("all_reduce", method, "all", 256, "pod256")
    inner = 2 * ring_closed_form("reduce_scatter", method, 64, N, B_IPU, 3e-6)
    outer = ring_closed_form("all_reduce", method, 4, N / 64, B_GW, 2e-4)
    assert t.ipu_links == pytest.approx(inner)
    assert t.gw_links == pytest.approx(outer)
    assert t.total == pytest.approx(inner + outer)


@pytest.mark.parametrize(
    ("kind", "inner_kind", "outer_n"),
    [
        ("reduce_scatter", "reduce_scatter", N / 64),
        ("all_gather", "all_gather", N / 64),
        ("broadcast", "broadcast", N),
    ],
)
def test_other_collectives_across_pods(kind, inner_kind, outer_n):
    t = time_of(kind, "clockwise_ring", "all", 128, "pod128")
    assert t.ipu_links == pytest.approx(
        ring_closed_form(inner_kind, "clockwise_ring", 64, N, B_IPU, 3e-6)
    )
    assert t.gw_links == pytest.approx(
        ring_closed_form(kind, "clockwise_ring", 2, outer_n, B_GW, 2e-4)
    )


def test_groups_set_the_ring_sizes():
    # Consecutive(8): rings of 8 inside a Pod.
    t = time_of("all_reduce", "clockwise_ring", "consecutive(8)", 256, "pod256")
    assert (t.ipu_links, t.gw_links) == (
        pytest.approx(ring_closed_form("all_reduce", "clockwise_ring", 8, N, B_IPU, 3e-6)),
        0.0,
    )
    # Orthogonal(4) of 256: members 64 apart, one per Pod: GW-Links only.
    t = time_of("all_reduce", "clockwise_ring", "orthogonal(4)", 256, "pod256")
    assert t.ipu_links == 0.0
    assert t.gw_links == pytest.approx(
        ring_closed_form("all_reduce", "clockwise_ring", 4, N, B_GW, 2e-4)
    )
    # Orthogonal(8) of 256: stride 32, two members per Pod, four Pods.
    layout = hardware.ReplicaLayout(256, 1)
    span = hardware.group_span("Orthogonal(k=8)", layout, hardware.get_system("pod256"))
    assert (span.per_domain, span.domains) == (2, 4)


def test_a_replica_of_k_ipus_runs_k_rings_on_n_over_k_bytes():
    t = time_of("all_reduce", "clockwise_ring", "all", 16, "pod64", ipus_per_replica=4)
    assert t.total == pytest.approx(
        ring_closed_form("all_reduce", "clockwise_ring", 16, N / 4, B_IPU, 3e-6)
    )


def test_auto_is_refused_since_gcl_settles_it_before_a_collective_runs():
    """``auto`` was once priced as the cheapest ring, which gcl never runs for a 4 MiB
    all-reduce (gcl's rule runs the clockwise ring there, 1.9x the cheapest's time)."""
    with pytest.raises(ValueError, match=r"record the method it runs, gcl\.collective_method"):
        hardware.StepProfile(
            grad_flops=1.0,
            grad_bytes_accessed=1.0,
            collectives=(("all_reduce", "auto", "all", 4 << 20),),
        )
    with pytest.raises(ValueError, match="is not a GCL method"):
        hardware.ring_seconds("all_reduce", "auto", 16, 4 << 20, 1e10, 1e-6)


def test_a_single_replica_group_costs_nothing():
    assert time_of("all_reduce", "clockwise_ring", "consecutive(1)", 16, "pod16").total == 0.0


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="is not a GCL method"):
        hardware.ring_seconds("all_reduce", "quadratic", 4, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="does not divide the 16 replicas"):
        hardware.resolve_group("consecutive(3)", 16)
    with pytest.raises(ValueError, match="is not a GCL group"):
        hardware.resolve_group("diagonal(2)", 16)


@given(
    kind=st.sampled_from(KINDS),
    method=st.sampled_from(METHODS),
    p=st.sampled_from([2, 4, 16, 64, 256]),
    n=st.floats(1e3, 1e9),
    b=st.floats(1e9, 1e11),
    factor=st.floats(1.0, 10.0),
)
def test_more_bandwidth_is_never_slower(kind, method, p, n, b, factor):
    slow = hardware.ring_seconds(kind, method, p, n, b, 1e-6)
    fast = hardware.ring_seconds(kind, method, p, n, b * factor, 1e-6)
    assert fast <= slow


@given(factor=st.floats(1.0, 8.0), replicas=st.sampled_from([64, 128, 512]))
def test_faster_gw_links_never_slow_a_cross_pod_all_reduce(factor, replicas):
    system = hardware.get_system("pod512")
    machine = dataclasses.replace(
        system.machine, gw_link_bandwidth=system.machine.gw_link_bandwidth * factor
    )
    faster = dataclasses.replace(system, machine=machine)
    layout = hardware.ReplicaLayout(replicas, 1)
    record = hardware.CollectiveRecord("all_reduce", "clockwise_ring", "all", N)
    assert (
        hardware.collective_time(record, layout, faster, PARAMS).total
        <= hardware.collective_time(record, layout, system, PARAMS).total
    )
