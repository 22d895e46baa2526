"""A toy step on a POD128, shared by the reports' tests."""

import pytest

import hardware

TOY = hardware.StepProfile(
    grad_flops=2e11,
    grad_bytes_accessed=1e10,
    update_flops=1e8,
    update_bytes_accessed=5e8,
    parameter_bytes=50_000_000,
    optimiser_state_bytes=50_000_000,
    gradient_bytes=50_000_000,
    activation_bytes=200_000_000,
    host_bytes_per_micro_batch=3_000_000,
    num_ops=1000,
    micro_batch_size=20,
    gradient_accumulation=2,
    precision="float16",
    collectives=[("all_reduce", "clockwise_ring", "all", 50_000_000)],
    name="toy",
)


@pytest.fixture(scope="module")
def toy_profile():
    """The toy step's profile: 128 replicas' worth of all-reduce, host IO and an update."""
    return TOY


@pytest.fixture(scope="module")
def simulation():
    """The toy step simulated on 128 replicas of a POD128 (64 instances)."""
    return hardware.simulate_step(
        TOY, hardware.ReplicaLayout(128, 64), hardware.get_system("pod128")
    )
