"""Outputs copied back to the host by output mode: each returned micro-batch's outputs go
over the host link as soon as it is computed, and the call returns once they are on the host
(PopTorch's OutputMode.All returns every micro-batch, Final only the last)."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware

# BERT-like outputs: a micro-batch's logits are far larger than its inputs.
PROFILE = hardware.StepProfile(
    grad_flops=4e10,
    grad_bytes_accessed=2e9,
    parameter_bytes=4_000_000,
    gradient_bytes=4_000_000,
    host_bytes_per_micro_batch=8_192,
    micro_batch_size=4,
    gradient_accumulation=8,
    device_iterations=2,
    name="outputs",
)
POD16 = hardware.get_system("pod16")
LAYOUT = hardware.ReplicaLayout(16, 1)


def _step(output_bytes, outputs_per_step):
    profile = dataclasses.replace(
        PROFILE,
        host_output_bytes_per_micro_batch=output_bytes,
        outputs_per_step=outputs_per_step,
    )
    return hardware.simulate_step(profile, LAYOUT, POD16)


def test_no_outputs_change_nothing():
    assert _step(0, 16).simulated_step_seconds == _step(0, 1).simulated_step_seconds


def test_returning_every_micro_batch_costs_more_than_the_last_one_only():
    big = 64 * 1024 * 1024  # 64 MiB of logits per micro-batch
    every, final = _step(big, 16), _step(big, 1)
    assert every.simulated_step_seconds > final.simulated_step_seconds
    assert every.phases["host_io"] > final.phases["host_io"] > 0
    for step, returned in ((every, 16), (final, 1)):
        copies = [e for e in step.events if dict(e.args).get("direction") == "device to host"]
        assert len(copies) == returned  # the steady step's own
    link = hardware.host_io_seconds(big, POD16, LAYOUT.num_replicas, LAYOUT.ipus_per_replica)
    assert every.host_io_seconds == pytest.approx(16 * link)


@settings(derandomize=True, deadline=None, max_examples=25)
@given(
    output_bytes=st.integers(0, 2**28),
    outputs=st.sampled_from([1, 2, 4, 8, 16]),
)
def test_the_step_is_at_least_its_output_copies_and_never_faster_than_without(
    output_bytes, outputs
):
    step = _step(output_bytes, outputs)
    without = _step(0, outputs)
    link = hardware.host_io_seconds(output_bytes, POD16, 16, 1)
    assert step.simulated_step_seconds >= without.simulated_step_seconds - 1e-12
    assert step.simulated_step_seconds >= outputs * link


def test_outputs_per_step_must_divide_the_micro_batches():
    with pytest.raises(ValueError, match="positive divisor of the 16 micro-batches"):
        dataclasses.replace(PROFILE, outputs_per_step=3)
