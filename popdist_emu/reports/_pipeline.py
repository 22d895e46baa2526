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

from collections.abc import Sequence

from hardware import StepSimulation, TimelineEvent, ipu_track

# One definition of the bubble and of the balance for the terminal, summary.json and the page.
BUBBLE_DEFINITION = (
    "The bubble is the share of the IPUs' time, during the pipeline's passes of a weight "
    "update, in which they wait: the ramp-up and ramp-down, the waits on the slowest stage and "
    "the IPU-Link exchanges (1 - the IPUs' busy time / (IPUs x the passes' time); under sharded "
    "execution, the time each IPU waits while the others run). In the step's phases that idle "
    "time is pipeline_bubble; its share of the whole step is smaller, because the step also "
    "holds the collectives, the weight update and the host's part"
)
BALANCE_DEFINITION = (
    "the busiest IPU's forward and backward time (all its stages) over the mean IPU's "
    "(1 = balanced)."
)


def bubble_share_of_step(sim: StepSimulation) -> float:
    """The ``pipeline_bubble`` phase as a share of the whole simulated step."""
    step = sim.simulated_step_seconds
    return sim.phases.get("pipeline_bubble", 0.0) / step if step > 0 else 0.0


def bubble_text(sim: StepSimulation) -> str:
    """``bubble 76.5 % of the IPUs' pipeline time (pipeline_bubble 0.594 ms, 46.9 % of the
    step)``: the bubble and its phase, stated together so the two figures never seem to
    disagree."""
    report = sim.pipeline
    if report is None:
        return ""
    return (
        f"bubble {100 * report.bubble_fraction:.1f} % of the IPUs' pipeline time "
        f"(pipeline_bubble {sim.phases.get('pipeline_bubble', 0.0) * 1e3:.3f} ms, "
        f"{100 * bubble_share_of_step(sim):.1f} % of the step)"
    )


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
    ipus = [
        {
            "ipu": ipu,
            "stages": list(report.stages_on(ipu)),
            "memory": dict(memory.categories),
            "memory_total": memory.total,
            "fits_in_memory": memory.fits,
        }
        for ipu, memory in enumerate(report.ipu_memory)
    ]
    return {
        "strategy": report.strategy,
        "schedule": report.schedule.schedule,
        "recomputation": report.recomputation,
        "stages": stages,
        "ipus": ipus,
        "bubble_fraction": report.bubble_fraction,
        "bubble_share_of_step": bubble_share_of_step(sim),
        "balance": report.balance,
        "pipeline_seconds": report.schedule.seconds,
        "transfer_seconds": report.schedule.transfer_seconds,
    }


def pipeline_tracks(sim: StepSimulation) -> tuple[str, ...]:
    """One trace track per IPU of replica 0 (none without a pipeline)."""
    if sim.pipeline is None:
        return ()
    return tuple(ipu_track(ipu) for ipu in sim.pipeline.schedule.ipus)


def memory_counter_events(
    sim: StepSimulation, pid: int, events: Sequence[TimelineEvent] | None = None
) -> list[dict]:
    """Chrome "C" events: bytes live on each IPU over ``events`` (default the step's)."""
    report = sim.pipeline
    if report is None:
        return []
    entry = report.stash_entries
    out = []
    for ipu, memory in enumerate(report.ipu_memory):
        track = ipu_track(ipu)
        live = memory.always_live
        changes = [(0.0, 0)]
        for e in sim.events if events is None else events:
            if e.track != track or e.name[0] not in "FB":
                continue
            stage = dict(e.args)["stage"]
            if e.name.startswith("F"):
                changes.append((e.start, entry[stage]))
            else:
                changes.append((e.start + e.duration, -entry[stage]))
        for t, delta in sorted(changes):
            live += delta
            out.append(
                {
                    "name": f"memory IPU {ipu}",
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
    k, n = len(report.schedule.stages), len(report.ipu_memory)
    stages_text = f" ({k} stages)" if k != n else ""
    lines = [
        f"  pipeline: {report.strategy} over {n} IPUs"
        f"{stages_text}"
        f"{' with recomputation' if report.recomputation else ''}; {bubble_text(sim)}, "
        f"balance {report.balance:.2f} (slowest/mean IPU)"
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
