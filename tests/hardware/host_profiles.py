"""The small step the host-side tests share: a model driven from Python, a few milliseconds
of IPU work per step, on an IPU-POD16 (``test_host_compute.py``, ``test_host_band.py``)."""

import hardware

SMALL = hardware.StepProfile(
    grad_flops=2e9,
    grad_bytes_accessed=1e8,
    parameter_bytes=400_000,
    gradient_bytes=400_000,
    host_bytes_per_micro_batch=3_200,
    micro_batch_size=16,
    gradient_accumulation=4,
    collectives=(hardware.CollectiveRecord("all_reduce", "clockwise_ring", "all", 400_000),),
    name="small",
)
POD16 = hardware.get_system("pod16")
