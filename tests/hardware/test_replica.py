"""One replica model: a data-parallel replica is the one-stage case of every pipeline.

A step is a tuple of stages; the data-parallel replica (one compiled micro-step, no
execution strategy) is one stage on IPU 0. Whatever strategy or schedule a lone stage is
run with, it is no pipeline: its micro-batches' passes run back to back, it keeps one
micro-batch's activations and it has no bubble, so its time, phases and memory are those of
the data-parallel replica, bit for bit.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware

CONV = hardware.ConvOp("conv", "conv", 1, 8 * 28 * 28, 64, 576, 64)

profiles = st.builds(
    hardware.StepProfile,
    grad_flops=st.floats(0, 1e12),
    grad_bytes_accessed=st.floats(0, 1e10),
    grad_transcendentals=st.floats(0, 1e8),
    update_flops=st.floats(0, 1e9),
    update_bytes_accessed=st.floats(0, 1e9),
    parameter_bytes=st.integers(0, 200_000_000),
    optimiser_state_bytes=st.integers(0, 400_000_000),
    gradient_bytes=st.integers(0, 400_000_000),
    activation_bytes=st.integers(0, 10**9),
    temporary_bytes=st.integers(0, 10**8),
    host_bytes_per_micro_batch=st.integers(0, 10**7),
    num_ops=st.integers(0, 20_000),
    micro_batch_size=st.integers(1, 64),
    gradient_accumulation=st.integers(1, 32),
    device_iterations=st.integers(1, 4),
    precision=st.sampled_from(["float16", "float32"]),
    collectives=st.sampled_from(
        [
            (),
            (("all_reduce", "clockwise_ring", "all", 50_000_000),),
            (
                ("reduce_scatter", "meet_in_middle_ring", "all", 3_000_000),
                ("all_gather", "clockwise_ring", "all", 3_000_000),
            ),
        ]
    ),
    replicated_tensor_sharding=st.booleans(),
    offload_optimiser_state=st.booleans(),
    recomputation=st.booleans(),
    matmuls=st.sampled_from([(), (CONV,), (CONV, CONV)]),
    host_cpu_seconds_per_sample=st.sampled_from([0.0, 1e-5]),
)
layouts = st.sampled_from(
    [(1, 1, "pod16"), (16, 4, "pod16"), (64, 32, "pod64"), (256, 128, "pod256")]
)


@settings(max_examples=60)
@given(
    profile=profiles,
    where=layouts,
    depth=st.integers(0, 4),
    strategy=st.sampled_from(["pipelined", "sharded"]),
    schedule=st.sampled_from(["grouped", "interleaved"]),
)
def test_a_data_parallel_replica_is_a_one_stage_pipeline_bit_for_bit(
    profile, where, depth, strategy, schedule
):
    replicas, instances, system = where
    layout = hardware.ReplicaLayout(replicas, instances)
    pod = hardware.get_system(system)
    plain = hardware.simulate_step(profile, layout, pod, prefetch_depth=depth)
    stage = hardware.micro_step_stage(profile)
    model = hardware.ReplicaModel(profile, (stage,), strategy, schedule)
    one = hardware.simulate_step(model, layout, pod, prefetch_depth=depth)
    assert one.simulated_step_seconds == plain.simulated_step_seconds
    assert one.phases == plain.phases and one.phases["pipeline_bubble"] == 0.0
    assert one.replica.ipu_memory == plain.replica.ipu_memory
    assert one.memory == plain.memory
    assert (one.host_io_exposed_seconds, one.host_compute_seconds) == (
        plain.host_io_exposed_seconds,
        plain.host_compute_seconds,
    )
    # The micro-step's passes, back to back: GA of them per update.
    pipe = one.replica.schedule
    assert pipe.micro_batch_seconds == plain.replica.schedule.micro_batch_seconds
    assert len([e for e in pipe.events if e.kind == "backward"]) == profile.gradient_accumulation
    assert plain.pipeline is None and one.pipeline is one.replica


@pytest.mark.parametrize("strategy", ["pipelined", "sharded"])
def test_the_stage_is_what_the_profile_holds(strategy):
    profile = hardware.StepProfile(
        grad_flops=3e9,
        grad_bytes_accessed=1e8,
        num_ops=500,
        parameter_bytes=7,
        gradient_bytes=14,
        activation_bytes=21,
    )
    stage = hardware.micro_step_stage(profile)
    assert (stage.ipu, stage.num_ops, stage.forward) == (0, 500, hardware.PassCounts())
    assert (stage.parameter_bytes, stage.gradient_bytes, stage.activation_bytes) == (7, 14, 21)
    assert hardware.as_replica(profile) == hardware.ReplicaModel(profile, (stage,))
    assert hardware.ReplicaModel(profile, (stage,), strategy).strategy == strategy
