"""Reports of the convolution planner: per IPU, temporary against always-live memory.

For each IPU of the replica: the available memory proportion its matmuls and convolutions
were planned with, the operations the planner had to plan for minimum memory (phase two),
always-live against not-always-live (temporary) memory as PopVision's liveness report
splits them, and the worst tile against the mean tile as its memory region report shows.

References:
    Graphcore, "Optimising Temporary Memory Usage for Convolutions and Matmuls on the IPU"
    (liveness and memory region reports, the phase-two warning); PopVision Graph Analyser
    User Guide (always-live and not-always-live memory).
"""

from __future__ import annotations

import sys
from typing import IO, TypedDict

from hardware import MemoryBreakdown, StepSimulation

MAX_WARNINGS_PRINTED = 5


def ipu_memories(simulation: StepSimulation) -> list[tuple[str, MemoryBreakdown]]:
    """(name, memory) of every IPU of replica 0: ``IPU0``, ``IPU1``, ..."""
    return [(f"IPU{i}", memory) for i, memory in enumerate(simulation.replica.ipu_memory)]


class AvailableMemory(TypedDict):
    """One IPU's entry of ``summary.json``'s ``available_memory`` object."""

    always_live_bytes: int
    not_always_live_bytes: int
    temporary_bytes: int
    worst_tile_bytes: int
    mean_tile_bytes: int
    tile_capacity_bytes: int
    available_memory_proportions: list[float]
    phase_two_operations: list[str]
    planner: dict | None  # ``PlannerReport.summary()``


def available_memory_summary(simulation: StepSimulation) -> dict[str, AvailableMemory]:
    """``summary.json``'s ``available_memory`` object: one entry per IPU of replica 0."""
    out = {}
    for name, memory in ipu_memories(simulation):
        plans = memory.planner
        entry: AvailableMemory = {
            "always_live_bytes": memory.always_live,
            "not_always_live_bytes": memory.not_always_live,
            "temporary_bytes": memory.categories["temporaries"],
            "worst_tile_bytes": round(memory.worst_tile),
            "mean_tile_bytes": round(memory.per_tile),
            "tile_capacity_bytes": memory.tile_capacity,
            "available_memory_proportions": [],
            "phase_two_operations": [],
            "planner": None,
        }
        if plans is not None:
            summary = plans.summary()
            entry["available_memory_proportions"] = summary["proportions"]
            entry["phase_two_operations"] = summary["phase_two_operations"]
            entry["planner"] = summary
        out[name] = entry
    return out


def planner_lines(simulation: StepSimulation) -> list[str]:
    """Printed summary lines: per IPU, liveness split, worst tile and phase-two count."""
    lines = []
    for name, entry in available_memory_summary(simulation).items():
        if entry["planner"] is None:
            continue
        amps = "/".join(f"{a:g}" for a in entry["available_memory_proportions"])
        lines.append(
            f"  {name}: always-live {entry['always_live_bytes'] / 2**20:,.1f} MiB, "
            f"not-always-live {entry['not_always_live_bytes'] / 2**20:,.1f} MiB "
            f"(temporaries {entry['temporary_bytes'] / 2**20:,.1f} MiB); worst tile "
            f"{entry['worst_tile_bytes'] / 1024:,.1f} KiB of "
            f"{entry['tile_capacity_bytes'] / 1024:,.0f} KiB (mean "
            f"{entry['mean_tile_bytes'] / 1024:,.1f} KiB); availableMemoryProportion {amps}, "
            f"{entry['planner']['operations']} matmuls/convolutions, "
            f"{len(entry['phase_two_operations'])} planned for minimum memory"
        )
    return lines


def planner_warnings(simulation: StepSimulation) -> list[str]:
    """PopLibs' phase-two warnings of every IPU, one per operation."""
    seen, out = set(), []
    for _, memory in ipu_memories(simulation):
        plans = memory.planner
        for warning in plans.warnings if plans is not None else ():
            if warning not in seen:
                seen.add(warning)
                out.append(warning)
    return out


def print_planner_warnings(simulation: StepSimulation, file: IO[str] | None = None) -> None:
    """Prints the phase-two warnings to stderr as Poplar logs them (the first few, then a
    count), so they appear even when the step is then refused for memory."""
    warnings = planner_warnings(simulation)
    stream = file or sys.stderr
    for line in warnings[:MAX_WARNINGS_PRINTED]:
        print(line, file=stream)
    if len(warnings) > MAX_WARNINGS_PRINTED:
        print(
            f"PL:POPLIN [W] ... and {len(warnings) - MAX_WARNINGS_PRINTED} more operations "
            "planned for minimum memory",
            file=stream,
        )
    stream.flush()
