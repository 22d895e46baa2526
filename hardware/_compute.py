"""IPU time of a compiled computation, from XLA's FLOP and byte counts.

References:
    Williams, Waterman and Patterson, "Roofline: an insightful visual performance model
    for multicore architectures", CACM 52(4), 2009: time is bounded by arithmetic and by
    memory traffic; the slower bound is the one a program pays.
"""

from __future__ import annotations

from collections.abc import Iterable

from hardware._parameters import (
    CLOCK_OF_FIT_HZ,
    TRANSCENDENTALS_PER_TILE_CYCLE,
    ModelParameters,
)
from hardware._planner import ConvOp
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
    compute_sets: int = 0,
    matmul_flops: float = 0.0,
) -> float:
    """Seconds an IPU (or a replica of ``num_ipus`` IPUs) needs for a computation.

    ``t = max((F - F_mm) / (eta * P) + F_mm / (eta_mm * P), B / M) + T / (tiles * clock *
    r) + C * s`` with F FLOPs, of which F_mm are the matmuls' (``matmul_flops``, at most F),
    B bytes accessed, T transcendentals, P the peak FLOP/s of ``precision`` (the datasheet's
    FP16.16 or FP32 peak), M the In-Processor-Memory bandwidth, eta and eta_mm the fitted
    sustained efficiencies of other FLOPs and of matmul FLOPs
    (``ModelParameters.compute_efficiency`` and ``matmul_efficiency``: each class of
    operation at its own rate, so the time adds), r one transcendental per tile per cycle,
    C the compute sets and s the fitted
    fixed cost of one compute set (its BSP sync and exchange set-up), which keeps small
    models from computing in microseconds. Work spread over ``num_ipus`` IPUs (a weight
    update, each IPU updating its own stages' weights) divides the arithmetic evenly; the
    compute sets run on every IPU. A stage's passes are costed on its one IPU
    (``hardware.stage_costs``).

    References:
        Williams et al. 2009 (roofline); P and M from the IPU-POD64 datasheet and the
        published GC200 figures cited in ``hardware/_specs.py``; Valiant, "A bridging model
        for parallel computation", CACM 33(8), 1990 (BSP supersteps); Jia et al.,
        "Dissecting the Graphcore IPU Architecture via Microbenchmarking", arXiv:1912.03413,
        2019 (sync and exchange phases of every compute set).
    """
    if min(flops, bytes_accessed, transcendentals) < 0:
        raise ValueError(
            f"flops, bytes_accessed and transcendentals must be >= 0, got {flops}, "
            f"{bytes_accessed}, {transcendentals}: pass XLA's cost_analysis() values."
        )
    n = max(int(num_ipus), 1)
    matmul = min(max(matmul_flops, 0.0), flops)
    peak = ipu.peak_flops(precision)
    arithmetic = (
        (flops - matmul) / params.compute_efficiency + matmul / params.matmul_efficiency
    ) / (n * peak)
    memory = bytes_accessed / n / ipu.memory_bandwidth
    special = transcendentals / n / (ipu.tiles * ipu.clock_hz * TRANSCENDENTALS_PER_TILE_CYCLE)
    if compute_sets < 0:
        raise ValueError(f"`compute_sets` must be >= 0, got {compute_sets}.")
    return max(arithmetic, memory) + special + compute_set_overhead(compute_sets, ipu, params)


def compute_set_overhead(compute_sets: int, ipu: IpuSpec, params: ModelParameters) -> float:
    """Seconds ``compute_sets`` compute sets cost beyond their arithmetic on ``ipu``: the
    fitted cost of one, measured in cycles of the clock of the fit, so a faster IPU pays it
    in proportionally less time."""
    return compute_sets * params.compute_set_seconds * CLOCK_OF_FIT_HZ / ipu.clock_hz


def matmul_flops(ops: Iterable[ConvOp]) -> float:
    """FLOPs of the matmuls among ``ops`` (``kind`` ``"matmul"``; convolutions are not):
    two per multiply-accumulate, ``2 x groups x rows x columns x reduction`` each, the
    count XLA's cost analysis gives a ``dot_general``."""
    macs = sum(op.groups * op.rows * op.columns * op.reduction for op in ops if op.kind == "matmul")
    return 2.0 * macs
