"""``trace.json``: the simulated IPU timeline and each instance's real host timeline.

Chrome trace event format (complete "X" events in microseconds, "C" counters, "M" metadata
naming processes and threads), so it opens in Perfetto (ui.perfetto.dev) and
chrome://tracing. Two kinds of process:

- the simulated POD (pid 1): the first steps of a run from an empty infeed (the first step
  waits for its data, the later ones find it prefetched), one track per IPU of replica 0 and
  one per link tier, each once, every event with its arguments (step, micro-batch, flops and
  bytes; a collective's kind, method, group and tier; a pipeline pass's stage and blocks);
- one process per instance (pid 100 + instance): what its host did in this run, on the wall
  clock: compiles, each step's micro-steps and reduce-and-update, the collectives as gcl ran
  them.

References:
    "Trace Event Format", the Catapult trace-viewer project's specification: "X" complete
    events with ``ts`` and ``dur`` in microseconds and ``args``; "C" counter events; "M"
    metadata events ``process_name``, ``thread_name``, ``process_sort_index`` and
    ``thread_sort_index``; the JSON object format's ``otherData``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hardware import TRACKS, StepSimulation, TimelineEvent
from popdist_emu.reports._pipeline import memory_counter_events, pipeline_tracks

if TYPE_CHECKING:
    from popdist_emu._host_timeline import HostSpan

SIMULATED_PID = 1
HOST_PID_BASE = 100  # + the instance


def _metadata(name: str, pid: int, tid: int, value: object, key: str = "name") -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def _tracks(sim: StepSimulation, events: Sequence[TimelineEvent]) -> list[str]:
    """Each track once, in order: the host, the IPUs of replica 0, then the links."""
    used = {e.track for e in events}
    ipus = sorted(
        {t for t in (*pipeline_tracks(sim), *used) if t.startswith("IPU ") and "(" in t},
        key=lambda t: int(t.split()[1]),
    )
    order = [TRACKS[0], *ipus, *(t for t in TRACKS[1:] if not t.startswith("IPU "))]
    return list(dict.fromkeys(t for t in order if t in used or t in ipus))


def simulated_events(sim: StepSimulation) -> list[dict]:
    """The simulated process: its metadata, every interval and the IPUs' memory counters."""
    events = sim.run_events or sim.events
    steps = 1 + max((dict(e.args).get("step", 0) for e in events), default=0)
    out = [
        _metadata(
            "process_name",
            SIMULATED_PID,
            0,
            f"simulated {sim.system.name}: {sim.layout.num_replicas} replicas, the first "
            f"{steps} step(s) of a run from an empty infeed",
        ),
        _metadata("process_sort_index", SIMULATED_PID, 0, 0, "sort_index"),
    ]
    tids = {track: i + 1 for i, track in enumerate(_tracks(sim, events))}
    for track, tid in tids.items():
        out.append(_metadata("thread_name", SIMULATED_PID, tid, track))
        out.append(_metadata("thread_sort_index", SIMULATED_PID, tid, tid, "sort_index"))
    for e in events:
        out.append(
            {
                "name": e.name,
                "cat": e.track,
                "ph": "X",
                "pid": SIMULATED_PID,
                "tid": tids[e.track],
                "ts": e.start * 1e6,
                "dur": e.duration * 1e6,
                "args": {**dict(e.args), "seconds": e.duration},
            }
        )
    out.extend(memory_counter_events(sim, SIMULATED_PID, events))
    return out


def host_events(timelines: Mapping[int, Sequence[HostSpan]]) -> list[dict]:
    """One process per instance: its host spans on the wall clock, from the earliest."""
    starts = [span["start"] for spans in timelines.values() for span in spans]
    origin = min(starts, default=0.0)
    out = []
    for instance, spans in sorted(timelines.items()):
        pid = HOST_PID_BASE + instance
        out.append(
            _metadata("process_name", pid, 0, f"instance {instance}: host (this run, wall clock)")
        )
        out.append(_metadata("process_sort_index", pid, 0, 1 + instance, "sort_index"))
        out.append(_metadata("thread_name", pid, 1, "host"))
        for span in spans:
            out.append(
                {
                    "name": span["name"],
                    "cat": "host",
                    "ph": "X",
                    "pid": pid,
                    "tid": 1,
                    "ts": (span["start"] - origin) * 1e6,
                    "dur": span["seconds"] * 1e6,
                    "args": {**span["args"], "seconds": span["seconds"], "instance": instance},
                }
            )
    return out


def chrome_trace(
    simulation: StepSimulation,
    host: Mapping[int, Sequence[HostSpan]] | None = None,
    missing: Sequence[int] = (),
) -> dict:
    """The trace: the simulated POD, and each instance's host timeline when given.

    Args:
        simulation: the simulated step.
        host: per instance, its host spans (``popdist_emu._host_timeline``).
        missing: instances whose host timeline did not arrive (named in ``otherData``).
    """
    trace: dict[str, object] = {
        "traceEvents": [*simulated_events(simulation), *host_events(host or {})],
        "displayTimeUnit": "ms",
    }
    if missing:
        trace["otherData"] = {"host_timelines_missing": list(missing)}
    return trace
