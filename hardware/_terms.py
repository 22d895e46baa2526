"""Which fitted terms produced each phase of a simulated step, from the program's structure.

Every program runs with the same fitted parameters (``hardware.ModelParameters``); what its
compiled program shows decides how much each weighs: the share of its FLOPs in matmuls (at
``matmul_efficiency``) against convolutions and the rest (at ``compute_efficiency``), its
compute sets, whether a replica spans several IPUs (``multi_ipu_sync_seconds`` per host
call), its collectives' link tiers. Reports name them per phase so a reader sees which fit a figure
leans on, and the uncertainty band is taken from the rows of the fit the step leans on
(``hardware._uncertainty.calibration_for``).
"""

from __future__ import annotations

from hardware._compute import matmul_flops
from hardware._step_simulation import StepSimulation
from hardware._timeline import multi_ipu_sync_calls

# A step leans on the matmul efficiency when at least this share of its FLOPs are matmuls'.
MATMUL_DOMINATED = 0.5


def matmul_share(sim: StepSimulation) -> float:
    """The share of the replica's micro-batch FLOPs (all stages, forward and backward) that
    are matmuls' (``hardware.matmul_flops``), in [0, 1]; 0 for a step without FLOPs."""
    total = matmul = 0.0
    for cost in sim.replica.schedule.stages:
        for counts in (cost.stage.forward, cost.stage.backward):
            total += counts.flops
            matmul += min(matmul_flops(counts.matmuls), counts.flops)
    return matmul / total if total > 0 else 0.0


def leaned_on(sim: StepSimulation) -> tuple[str, ...]:
    """The structural parameters that weigh in this step: ``matmul_efficiency`` when its
    FLOPs are matmul-dominated (at least ``MATMUL_DOMINATED``), ``multi_ipu_sync_seconds``
    when a replica spans several IPUs."""
    out = []
    if matmul_share(sim) >= MATMUL_DOMINATED:
        out.append("matmul_efficiency")
    if multi_ipu_sync_calls(sim.layout) and sim.parameters.multi_ipu_sync_seconds > 0:
        out.append("multi_ipu_sync_seconds")
    return tuple(out)


def phase_terms(sim: StepSimulation) -> dict[str, str]:
    """For each phase with time in it, the fitted terms (and the program's figures that
    weigh them) that produced it, one short line each."""
    p = sim.parameters
    share = matmul_share(sim)
    compute = (
        f"matmul FLOPs {share:.0%} at matmul_efficiency {p.matmul_efficiency:.3f}, other "
        f"FLOPs at compute_efficiency {p.compute_efficiency:.3f}, "
        f"compute_set_seconds {p.compute_set_seconds * 1e6:.2f} us per compute set"
    )
    sync = f"host_sync_seconds {p.host_sync_seconds * 1e3:.3f} ms per step"
    if multi_ipu_sync_calls(sim.layout):
        sync += (
            f" + multi_ipu_sync_seconds {p.multi_ipu_sync_seconds * 1e3:.3f} ms (a replica "
            f"of {sim.layout.ipus_per_replica} IPUs)"
        )
    link = (
        f"ipu_link_latency {p.ipu_link_latency * 1e6:.1f} us, gw_link_latency "
        f"{p.gw_link_latency * 1e3:.2f} ms per ring step, link bandwidths"
    )
    terms = {
        "host_compute": "the host CPU per sample measured on this machine",
        "host_io": "host-link bandwidth (datasheet)",
        "compute": compute,
        "pipeline_bubble": f"the pipeline's idle share of compute ({compute})",
        "gradient_accumulation": "In-Processor-Memory bandwidth (datasheet)",
        "allreduce": link,
        "reduce_scatter": link,
        "all_gather": link,
        "broadcast": link,
        "weight_update": f"update FLOPs at compute_efficiency {p.compute_efficiency:.3f}",
        "streaming": "optimiser state over the gateways' Streaming Memory bandwidth",
        "host_sync": sync,
    }
    return {phase: terms[phase] for phase, seconds in sim.phases.items() if seconds > 0}
