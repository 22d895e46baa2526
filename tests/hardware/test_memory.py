"""Memory per IPU by category, and the out-of-memory refusal."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hardware
from hardware._parameters import CODE_BYTES_PER_OP_PER_TILE

POD16 = hardware.get_system("pod16")
LAYOUT = hardware.ReplicaLayout(16, 4)


def profile(**changes):
    base = dict(
        grad_flops=1e9,
        grad_bytes_accessed=1e8,
        parameter_bytes=40_000_000,
        optimiser_state_bytes=80_000_000,
        gradient_bytes=40_000_000,
        activation_bytes=100_000_000,
        temporary_bytes=20_000_000,
        host_bytes_per_micro_batch=1_000_000,
        num_ops=1000,
        micro_batch_size=8,
        gradient_accumulation=4,
        collectives=[("all_reduce", "clockwise_ring", "all", 40_000_000)],
        name="toy",
    )
    base.update(changes)
    return hardware.StepProfile(**base)


def test_categories_add_up():
    memory = hardware.memory_per_ipu(profile(), LAYOUT, POD16)
    assert set(memory.categories) == set(hardware.MEMORY_CATEGORIES)
    assert memory.total == sum(memory.categories.values())
    assert memory.total == memory.always_live + memory.not_always_live
    assert memory.categories["weights"] == 40_000_000
    assert memory.categories["gradient_accumulators"] == 40_000_000
    # the micro-batch being computed + the prefetched ones
    assert memory.categories["stream_buffers"] == (1 + hardware.DEFAULT_PREFETCH_DEPTH) * 1_000_000
    assert memory.capacity == hardware.GC200.in_processor_memory


def test_code_is_charged_per_operation_that_holds_it():
    """Vertex code per operation on every tile: the operations the framework records
    (``code_ops``: a traced PyTorch operation once), not its lowering's primitives, which
    stay the compute sets; without ``code_ops`` every primitive holds code."""
    ipu = hardware.GC200
    per_op = CODE_BYTES_PER_OP_PER_TILE * ipu.tiles
    assert hardware.memory_per_ipu(profile(), LAYOUT, POD16).categories["code"] == 1000 * per_op
    traced = hardware.memory_per_ipu(profile(code_ops=120), LAYOUT, POD16)
    assert traced.categories["code"] == 120 * per_op


def test_no_accumulator_without_gradient_accumulation():
    memory = hardware.memory_per_ipu(profile(gradient_accumulation=1), LAYOUT, POD16)
    assert memory.categories["gradient_accumulators"] == 0


def test_rts_shards_and_offloading_removes_the_optimiser_state():
    rts = hardware.memory_per_ipu(
        profile(replicated_tensor_sharding=True, sharding_domain=4), LAYOUT, POD16
    )
    assert rts.categories["optimizer_state"] == 80_000_000 // 4
    offloaded = hardware.memory_per_ipu(profile(offload_optimiser_state=True), LAYOUT, POD16)
    assert offloaded.categories["optimizer_state"] == 0


def test_a_data_parallel_replica_of_several_ipus_runs_on_its_first():
    """One program and no execution strategy: everything on IPU 0, as PopTorch places a
    model without blocks; the replica's other IPUs hold nothing."""
    layout = hardware.ReplicaLayout(8, 4, 2)
    two = hardware.replica_memory(hardware.as_replica(profile()), layout, POD16)
    one = hardware.memory_per_ipu(profile(), LAYOUT, POD16)
    assert two[0].categories == {**one.categories, "exchange_code": two[0].categories[
        "exchange_code"
    ]}  # fmt: skip
    assert two[1].total == 0 and hardware.memory_per_ipu(profile(), layout, POD16) == two[0]


def test_exchange_code_grows_with_replicas():
    sizes = [
        hardware.memory_per_ipu(
            profile(), hardware.ReplicaLayout(r, 1), hardware.get_system("pod256")
        ).categories["exchange_code"]
        for r in (1, 2, 16, 256)
    ]
    assert sizes == sorted(sizes) and sizes[0] == 0 and sizes[-1] > sizes[1]


def test_out_of_memory_is_raised_exactly_when_it_does_not_fit():
    base = hardware.memory_per_ipu(profile(activation_bytes=0), LAYOUT, POD16).total
    room = hardware.GC200.in_processor_memory - base
    fitting = profile(activation_bytes=room)
    assert hardware.check_memory(fitting, LAYOUT, POD16).total == hardware.GC200.in_processor_memory
    too_big = profile(activation_bytes=room + 1)
    with pytest.raises(
        hardware.OutOfMemoryError, match=r"^Out of memory: toy at micro-batch 8"
    ) as e:
        hardware.check_memory(too_big, LAYOUT, POD16)
    message = str(e.value)
    for phrase in (
        "always-live",
        "not-always-live",
        "activations",
        "Remedies:",
        "smaller micro-batch (--micro-batch-size 4)",
        "recomputation",
        "replicated tensor sharding",
        "offloading the optimiser state",
        "pipelining",
    ):
        assert phrase in message


def test_remedies_already_applied_are_not_offered():
    huge = profile(
        activation_bytes=2 * 10**9,
        recomputation=True,
        replicated_tensor_sharding=True,
        offload_optimiser_state=True,
        micro_batch_size=1,
    )
    with pytest.raises(hardware.OutOfMemoryError) as e:
        hardware.check_memory(huge, LAYOUT, POD16)
    remedies = str(e.value).split("Remedies:")[1]
    assert "pipelining" in remedies
    for absent in ("micro-batch", "recomputation", "sharding", "offloading"):
        assert absent not in remedies


def test_check_memory_takes_a_simulation():
    sim = hardware.simulate_step(profile(), LAYOUT, POD16)
    assert hardware.check_memory(sim) == sim.memory
    with pytest.raises(hardware.OutOfMemoryError, match="Out of memory:"):
        hardware.check_memory(
            hardware.simulate_step(profile(activation_bytes=10**9), LAYOUT, POD16)
        )


@given(
    activations=st.integers(0, 2 * 10**9),
    temporaries=st.integers(0, 10**9),
    extra=st.integers(0, 10**8),
)
def test_more_bytes_never_less_memory_and_oom_matches_fits(activations, temporaries, extra):
    small = hardware.memory_per_ipu(
        profile(activation_bytes=activations, temporary_bytes=temporaries), LAYOUT, POD16
    )
    large = hardware.memory_per_ipu(
        profile(activation_bytes=activations + extra, temporary_bytes=temporaries), LAYOUT, POD16
    )
    assert large.total >= small.total
    if small.total > small.capacity:
        assert not small.fits
        with pytest.raises(hardware.OutOfMemoryError):
            hardware.check_memory(
                profile(activation_bytes=activations, temporary_bytes=temporaries), LAYOUT, POD16
            )
    else:
        assert small.fits
