"""The pipeline parts of the reports: ``summary.json``'s ``pipeline``, per-IPU trace tracks.

``trace.json`` gets one track per IPU of replica 0 with each micro-batch's forward (``F3``)
and backward (``B3``) as its own event and the IPU-Link exchanges, so Perfetto draws the
pipeline diagram of the PopTorch tutorial, and a memory counter per IPU (bytes live over
the step: always-live memory plus the activation stash, as PopVision's liveness view).

References:
    "Trace Event Format" (Catapult): "C" counter events; Graphcore tutorials, "PopTorch:
    pipelining" (the pipeline diagram); PopVision Graph Analyser (liveness).
"""

from __future__ import annotations

from hardware import StepSimulation, ipu_track


def pipeline_summary(sim: StepSimulation) -> dict | None:
    """The ``pipeline`` object of ``summary.json`` (None when the replica runs no pipeline)."""
    report = sim.pipeline
    if report is None:
        return None
    stages = []
    for i, stage in enumerate(report.schedule.stages):
        memory = report.stage_memory[i]
        stages.append(
            {
                "stage": i,
                "ipu": stage.ipu,
                "blocks": list(stage.blocks),
                "forward_seconds": stage.forward_seconds,
                "backward_seconds": stage.backward_seconds,
                "stash_bytes": report.stash_bytes[i],
                "memory": dict(memory.categories),
                "memory_total": memory.total,
                "fits_in_memory": memory.fits,
            }
        )
    return {
        "strategy": report.strategy,
        "schedule": report.schedule.schedule,
        "recomputation": report.recomputation,
        "stages": stages,
        "bubble_fraction": report.bubble_fraction,
        "balance": report.balance,
        "pipeline_seconds": report.schedule.seconds,
        "transfer_seconds": report.schedule.transfer_seconds,
    }


def pipeline_tracks(sim: StepSimulation) -> tuple[str, ...]:
    """One trace track per IPU of replica 0 (none without a pipeline)."""
    if sim.pipeline is None:
        return ()
    return tuple(ipu_track(stage.ipu) for stage in sim.pipeline.schedule.stages)


def memory_counter_events(sim: StepSimulation, pid: int) -> list[dict]:
    """Chrome "C" events: bytes live on each IPU over the step."""
    report = sim.pipeline
    if report is None:
        return []
    out = []
    for i, stage in enumerate(report.schedule.stages):
        track = ipu_track(stage.ipu)
        entry = stage.input_bytes if report.recomputation else stage.activation_bytes
        live = report.stage_memory[i].always_live
        changes = [(0.0, 0)]
        for e in sim.events:
            if e.track != track:
                continue
            if e.name.startswith("F"):
                changes.append((e.start, entry))
            elif e.name.startswith("B"):
                changes.append((e.start + e.duration, -entry))
        for t, delta in sorted(changes):
            live += delta
            out.append(
                {
                    "name": f"memory IPU {stage.ipu}",
                    "ph": "C",
                    "pid": pid,
                    "ts": t * 1e6,
                    "args": {"bytes": live},
                }
            )
    return out


def pipeline_lines(sim: StepSimulation) -> list[str]:
    """The printed summary's pipeline lines."""
    report = sim.pipeline
    if report is None:
        return []
    lines = [
        f"  pipeline: {report.strategy} over {len(report.schedule.stages)} IPUs"
        f"{' with recomputation' if report.recomputation else ''}; bubble "
        f"{report.bubble_fraction:.1%}, balance {report.balance:.2f} (slowest/mean stage)"
    ]
    for i, stage in enumerate(report.schedule.stages):
        memory = report.stage_memory[i]
        lines.append(
            f"    IPU {stage.ipu} [{', '.join(stage.blocks)}]: fwd "
            f"{stage.forward_seconds * 1e3:.3f} ms, bwd {stage.backward_seconds * 1e3:.3f} ms, "
            f"stash {report.stash_bytes[i] / 2**20:,.1f} MiB, memory "
            f"{memory.total / 2**20:,.1f} MiB"
        )
    return lines
