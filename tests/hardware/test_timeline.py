"""The simulated step: phases, overlap of host IO, scaling."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hardware

PARAMS = hardware.ModelParameters(
    compute_efficiency=0.25, ipu_link_latency=5e-6, gw_link_latency=1e-3, host_sync_seconds=5e-4
)


def profile(**changes):
    base = dict(
        grad_flops=2e11,
        grad_bytes_accessed=1e10,
        grad_transcendentals=1e4,
        update_flops=1e8,
        update_bytes_accessed=5e8,
        parameter_bytes=50_000_000,
        optimiser_state_bytes=50_000_000,
        gradient_bytes=50_000_000,
        activation_bytes=200_000_000,
        host_bytes_per_micro_batch=3_000_000,
        num_ops=1000,
        micro_batch_size=20,
        gradient_accumulation=4,
        device_iterations=2,
        precision="float16",
        collectives=[("all_reduce", "clockwise_ring", "all", 50_000_000)],
    )
    base.update(changes)
    return hardware.StepProfile(**base)


def simulate(p, replicas=16, system="pod16", **kwargs):
    layout = hardware.ReplicaLayout(replicas, max(replicas // 2, 1))
    return hardware.simulate_step(
        p, layout, hardware.get_system(system), parameters=PARAMS, **kwargs
    )


def test_phases_are_the_closed_forms_and_make_up_the_step():
    p = profile()
    sim = simulate(p)
    gc200 = hardware.GC200
    compute = max(2e11 / (0.25 * 250e12), 1e10 / gc200.memory_bandwidth) + 1e4 / (1472 * 1.33e9)
    compute += p.num_ops * PARAMS.compute_set_seconds  # one BSP sync + exchange per op
    assert sim.phases["compute"] == pytest.approx(8 * compute)
    assert sim.phases["gradient_accumulation"] == pytest.approx(8 * 3 * 50e6 / 47.5e12)
    record = hardware.CollectiveRecord("all_reduce", "clockwise_ring", "all", 50_000_000)
    layout = hardware.ReplicaLayout(16, 8)
    ar = hardware.collective_time(record, layout, hardware.get_system("pod16"), PARAMS).total
    assert sim.phases["allreduce"] == pytest.approx(2 * ar)
    assert sim.phases["host_sync"] == pytest.approx(5e-4)
    assert set(sim.phases) == set(hardware.PHASES)
    # Host IO is hidden here, so the step is the sum of the IPU's phases.
    assert sim.host_io_exposed_seconds == 0.0
    assert sim.simulated_step_seconds == pytest.approx(sum(sim.phases.values()))
    assert sim.samples_per_second == pytest.approx(16 * 20 * 4 * 2 / sim.simulated_step_seconds)


def test_host_io_without_prefetch_is_exposed_except_behind_non_compute_phases():
    # No collective, update or sync to hide behind: every transfer waits for the buffer.
    p = profile(
        gradient_accumulation=1,
        device_iterations=8,
        collectives=(),
        update_flops=0.0,
        update_bytes_accessed=0.0,
    )
    layout = hardware.ReplicaLayout(16, 8)
    no_sync = PARAMS.__class__(**{**PARAMS.to_json(), "host_sync_seconds": 0.0})
    sim = hardware.simulate_step(
        p, layout, hardware.get_system("pod16"), parameters=no_sync, prefetch_depth=0
    )
    # 4 replicas of a machine share 2 x 12.5 GB/s.
    per_micro_batch = 4 * 3_000_000 / 25e9
    assert sim.host_io_exposed_seconds == pytest.approx(8 * per_micro_batch)
    assert sim.simulated_step_seconds == pytest.approx(sum(sim.phases.values()))
    # With the default prefetch, the same transfers hide behind the compute.
    hidden = hardware.simulate_step(p, layout, hardware.get_system("pod16"), parameters=no_sync)
    assert hidden.host_io_exposed_seconds == pytest.approx(0.0, abs=1e-12)


def test_host_io_slower_than_compute_is_exposed_by_the_difference():
    # 1 GB per micro-batch: 0.16 s of host IO per micro-batch against ~13 ms of compute.
    p = profile(host_bytes_per_micro_batch=10**9)
    sim = simulate(p, prefetch_depth=2)
    io = 4 * 1e9 / 25e9
    assert sim.host_io_seconds == pytest.approx(8 * io)
    # Steady state: the host link is the bottleneck, busy the whole step.
    assert sim.simulated_step_seconds == pytest.approx(8 * io)
    deeper = simulate(p, prefetch_depth=8)
    assert deeper.simulated_step_seconds <= sim.simulated_step_seconds + 1e-12


def test_offloading_adds_streaming_and_rts_shards_the_update():
    base = simulate(profile())
    offloaded = simulate(profile(offload_optimiser_state=True))
    assert offloaded.phases["streaming"] == pytest.approx(2 * 2 * 50e6 / (350e9 / 4))
    assert offloaded.simulated_step_seconds > base.simulated_step_seconds
    rts = simulate(
        profile(
            replicated_tensor_sharding=True,
            update_bytes_accessed=5e11,
            collectives=[
                ("reduce_scatter", "clockwise_ring", "all", 50_000_000),
                ("all_gather", "clockwise_ring", "all", 50_000_000),
            ],
        )
    )
    assert rts.phases["allreduce"] == 0.0
    assert rts.phases["reduce_scatter"] > 0 and rts.phases["all_gather"] > 0
    full = simulate(profile(update_bytes_accessed=5e11))
    assert rts.phases["weight_update"] == pytest.approx(full.phases["weight_update"] / 16)


def test_events_lie_inside_the_step_on_known_tracks():
    sim = simulate(profile(), replicas=128, system="pod128")
    assert {e.track for e in sim.events} <= set(hardware.TRACKS)
    assert {"IPU-Links", "GW-Links"} <= {e.track for e in sim.events}
    for event in sim.events:
        assert 0 <= event.start < sim.simulated_step_seconds
        assert event.start + event.duration <= sim.simulated_step_seconds * (1 + 1e-9)


def test_a_job_larger_than_the_system_is_refused():
    with pytest.raises(hardware.SystemSelectionError, match="needs 64 IPUs but pod16 has 16"):
        hardware.simulate_step(
            profile(), hardware.ReplicaLayout(64, 8), hardware.get_system("pod16")
        )


def test_calibrated_parameters_are_loaded_by_default():
    layout = hardware.ReplicaLayout(16, 8)
    sim = hardware.simulate_step(profile(), layout, hardware.get_system("pod16"))
    assert sim.parameters == hardware.load_parameters()


def test_a_model_s_name_picks_no_parameter():
    layout, pod16 = hardware.ReplicaLayout(16, 8), hardware.get_system("pod16")
    toy = hardware.simulate_step(profile(name="toy"), layout, pod16)
    bert = hardware.simulate_step(profile(name="BERT-large"), layout, pod16)
    assert bert.parameters == toy.parameters == hardware.load_parameters()
    assert bert.phases == toy.phases and bert.samples_per_second == toy.samples_per_second


def _matmul(kind, n=1024):
    return hardware.ConvOp("op", kind, groups=1, rows=n, columns=n, reduction=n, depth=n)


def test_matmul_flops_run_at_the_matmul_efficiency_and_the_rest_at_the_compute_one():
    # 2 x 1024^3 FLOPs each: one matmul, one convolution (which stays at compute_efficiency).
    flops = 2.0 * 1024**3
    assert hardware.matmul_flops([_matmul("matmul"), _matmul("conv")]) == flops
    params = hardware.ModelParameters(compute_efficiency=0.2, matmul_efficiency=0.4)
    ipu, peak = hardware.GC200, hardware.GC200.peak_flops("float16")
    mixed = hardware.compute_seconds(4 * flops, 0, 0, ipu, "float16", params, matmul_flops=flops)
    assert mixed == pytest.approx((3 * flops / 0.2 + flops / 0.4) / peak)
    # The share is capped at the pass's FLOPs.
    capped = hardware.compute_seconds(flops, 0.0, 0.0, ipu, "float16", params, matmul_flops=9e99)
    assert capped == pytest.approx(flops / 0.4 / peak)


def test_a_matmul_dominated_step_leans_on_the_matmul_efficiency():
    layout, pod16 = hardware.ReplicaLayout(16, 8), hardware.get_system("pod16")
    flops = 2.0 * 1024**3 * 8
    params = hardware.ModelParameters(compute_efficiency=0.2, matmul_efficiency=0.4)
    steps = {}
    for kind in ("matmul", "conv"):
        p = profile(grad_flops=flops, grad_bytes_accessed=1e6, matmuls=(_matmul(kind),) * 8)
        steps[kind] = hardware.simulate_step(p, layout, pod16, parameters=params)
    assert hardware.matmul_share(steps["matmul"]) == pytest.approx(1.0)
    assert hardware.matmul_share(steps["conv"]) == 0.0
    assert steps["matmul"].phases["compute"] < steps["conv"].phases["compute"]
    assert hardware.leaned_on(steps["matmul"]) == ("matmul_efficiency",)
    assert hardware.leaned_on(steps["conv"]) == ()
    assert "matmul FLOPs 100%" in hardware.phase_terms(steps["matmul"])["compute"]


def test_a_replica_of_several_ipus_pays_the_multi_ipu_host_sync_once_per_call():
    pod16 = hardware.get_system("pod16")
    params = hardware.ModelParameters(host_sync_seconds=1e-3, multi_ipu_sync_seconds=0.1)
    one, two = hardware.ReplicaLayout(4, 2), hardware.ReplicaLayout(4, 2, ipus_per_replica=2)
    assert (hardware.multi_ipu_sync_calls(one), hardware.multi_ipu_sync_calls(two)) == (0, 1)
    stages = (
        hardware.StageProfile(0, ("B0",), hardware.PassCounts(1e9), hardware.PassCounts(2e9)),
        hardware.StageProfile(1, ("B1",), hardware.PassCounts(1e9), hardware.PassCounts(2e9)),
    )
    p = profile(collectives=[], device_iterations=4)
    plain = hardware.simulate_step(p, one, pod16, parameters=params)
    piped = hardware.simulate_step(
        hardware.ReplicaModel(p, stages, "pipelined"), two, pod16, parameters=params
    )
    assert plain.phases["host_sync"] == pytest.approx(1e-3)
    assert piped.phases["host_sync"] == pytest.approx(0.101)  # once per call, 4 updates
    assert "multi_ipu_sync_seconds 100.000 ms" in hardware.phase_terms(piped)["host_sync"]
    assert "multi_ipu_sync_seconds" in hardware.leaned_on(piped)
    assert hardware.leaned_on(plain) == ()


@given(
    exponent=st.integers(0, 9),
    ga=st.integers(1, 8),
    bandwidth_factor=st.floats(1.0, 4.0),
)
def test_more_replicas_never_more_samples_per_second_per_replica(exponent, ga, bandwidth_factor):
    p = profile(gradient_accumulation=ga)
    fewer = simulate(p, replicas=2**exponent, system="pod1024")
    more = simulate(p, replicas=2 ** (exponent + 1), system="pod1024")
    assert more.samples_per_second / 2 ** (
        exponent + 1
    ) <= fewer.samples_per_second / 2**exponent * (1 + 1e-12)
