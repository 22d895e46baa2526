"""IPU time of a compiled computation, from XLA's FLOP and byte counts.

References:
    Williams, Waterman and Patterson, "Roofline: an insightful visual performance model
    for multicore architectures", CACM 52(4), 2009: time is bounded by arithmetic and by
    memory traffic; the slower bound is the one a program pays.
"""

from __future__ import annotations

from hardware._parameters import TRANSCENDENTALS_PER_TILE_CYCLE, ModelParameters
from hardware._specs import IpuSpec


def compute_seconds(
    flops: float,
    bytes_accessed: float,
    transcendentals: float,
    ipu: IpuSpec,
    precision: str,
    params: ModelParameters,
    *,
    num_ipus: int = 1,
) -> float:
    """Seconds an IPU (or a replica of ``num_ipus`` IPUs) needs for a computation.

    ``t = max(F / (eta * P), B / M) + T / (tiles * clock * r)`` with F FLOPs, B bytes
    accessed, T transcendentals, P the peak FLOP/s of ``precision``, M the
    In-Processor-Memory bandwidth, eta the fitted sustained efficiency and r one
    transcendental per tile per cycle. A replica spanning several IPUs divides the work
    evenly (the ideal of model parallelism; pipelining's ramp is not modelled).

    References:
        Williams et al. 2009 (roofline); P and M from the IPU-POD64 datasheet and the
        published GC200 figures cited in ``hardware/_specs.py``.
    """
    if min(flops, bytes_accessed, transcendentals) < 0:
        raise ValueError(
            f"flops, bytes_accessed and transcendentals must be >= 0, got {flops}, "
            f"{bytes_accessed}, {transcendentals}: pass XLA's cost_analysis() values."
        )
    n = max(int(num_ipus), 1)
    arithmetic = flops / n / (params.compute_efficiency * ipu.peak_flops(precision))
    memory = bytes_accessed / n / ipu.memory_bandwidth
    special = transcendentals / n / (ipu.tiles * ipu.clock_hz * TRANSCENDENTALS_PER_TILE_CYCLE)
    return max(arithmetic, memory) + special
