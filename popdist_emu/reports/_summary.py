"""Reports of a simulated step: ``summary.json``, the printed summary, and writing them
with ``trace.json`` (``popdist_emu.reports._trace``) and ``report.html``."""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from contract import write_atomically
from hardware import StepSimulation
from popdist_emu.reports._confidence import uncertainty_lines, uncertainty_summary
from popdist_emu.reports._html import write_run_report
from popdist_emu.reports._pipeline import pipeline_lines, pipeline_summary
from popdist_emu.reports._planner import available_memory_summary, planner_lines
from popdist_emu.reports._run_info import RunInfo
from popdist_emu.reports._trace import chrome_trace

if TYPE_CHECKING:
    from popdist_emu._host_timeline import HostSpan

SUMMARY_FILE = "summary.json"
TRACE_FILE = "trace.json"


def summary(simulation: StepSimulation, run: RunInfo | None = None) -> dict:
    """The content of ``summary.json``: JSON-ready, keys stable across versions.

    Args:
        simulation: the simulated step.
        run: the command, date and versions that made it (``run``; None when not known).
    """
    sim, p, layout = simulation, simulation.profile, simulation.layout
    return {
        "system": sim.system.name,
        "ipu": sim.system.ipu.name,
        "replicas": layout.num_replicas,
        "instances": layout.num_instances,
        "ipus_per_replica": layout.ipus_per_replica,
        "model": p.name,
        "micro_batch_size": p.micro_batch_size,
        "gradient_accumulation": p.gradient_accumulation,
        "device_iterations": p.device_iterations,
        "samples_per_step": sim.samples_per_step,
        "simulated_step_seconds": sim.simulated_step_seconds,
        "samples_per_second": sim.samples_per_second,
        "phases": dict(sim.phases),
        "memory_per_ipu": dict(sim.memory.categories),
        "memory_per_ipu_total": sim.memory.total,
        "memory_capacity_per_ipu": sim.memory.capacity,
        "fits_in_memory": sim.memory.fits,
        "host_io_exposed_seconds": sim.host_io_exposed_seconds,
        "host_io_seconds": sim.host_io_seconds,
        "host_compute_seconds": sim.host_compute_seconds,
        "host_cpu_seconds_per_sample": p.host_cpu_seconds_per_sample,
        "host_cpu_relative_spread": p.host_cpu_relative_spread,
        "host_output_bytes_per_micro_batch": p.host_output_bytes_per_micro_batch,
        "outputs_per_step": p.outputs_per_step,
        "ipu_bound_samples_per_second": _finite(sim.ipu_bound_samples_per_second),
        "host_bound_samples_per_second": _finite(sim.host_bound_samples_per_second),
        "host_bound": sim.host_bound,
        "prefetch_depth": sim.prefetch_depth,
        "model_parameters": sim.parameters.to_json(),
        "pipeline": pipeline_summary(sim),
        "available_memory": available_memory_summary(sim),
        "uncertainty": uncertainty_summary(sim),
        "run": None if run is None else run.to_json(),
    }


def _finite(value: float) -> float | None:
    """JSON has no infinity: an unbounded throughput is null."""
    return value if math.isfinite(value) else None


def write_reports(
    simulation: StepSimulation,
    report_dir: str | os.PathLike,
    run: RunInfo | None = None,
    host: Mapping[int, Sequence[HostSpan]] | None = None,
    missing: Sequence[int] = (),
) -> pathlib.Path:
    """Writes ``summary.json``, ``trace.json`` and ``report.html`` into ``report_dir``
    (created if needed); ``run`` (the command, date and versions) goes into the first and
    the last, the instances' ``host`` timelines (``popdist_emu._host_timeline``) into the
    trace, ``missing`` naming those that did not arrive.

    Returns:
        The report directory.
    """
    directory = pathlib.Path(report_dir)
    directory.mkdir(parents=True, exist_ok=True)
    # Renamed into place: a failed write keeps the old report, a symlink is replaced.
    text = json.dumps(summary(simulation, run), indent=2) + "\n"
    write_atomically(directory / SUMMARY_FILE, text)
    trace = chrome_trace(simulation, host, missing)
    write_atomically(directory / TRACE_FILE, json.dumps(trace) + "\n")
    write_run_report(simulation, directory, run)  # report.html: the same figures as pictures
    return directory


def _bytes(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _duration(seconds: float) -> str:
    """Milliseconds, or microseconds for the tiny phases of small models (never "0.00 ms")."""
    if 0 < seconds < 1e-4:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def format_summary(simulation: StepSimulation) -> str:
    """The short human summary every run prints."""
    sim, layout = simulation, simulation.layout
    step = sim.simulated_step_seconds
    phases = ", ".join(
        f"{name} {_duration(seconds)}" for name, seconds in sim.phases.items() if seconds > 0
    )
    memory = sim.memory
    largest = sorted(memory.categories.items(), key=lambda kv: -kv[1])[:3]
    return "\n".join(
        [
            f"[popdist-emu] simulated {sim.system.name} ({sim.system.ipu.name}): "
            f"{layout.num_replicas} replicas x {layout.ipus_per_replica} IPU, "
            f"{layout.num_instances} instances",
            f"  step {_duration(step)} for {sim.samples_per_step} samples -> "
            f"{sim.samples_per_second:,.0f} samples/s; host IO exposed "
            f"{_duration(sim.host_io_exposed_seconds)}",
            f"  phases: {phases}",
            f"  memory per IPU: {_bytes(memory.total)} of {_bytes(memory.capacity)} "
            f"({'fits' if memory.fits else 'DOES NOT FIT'}); largest: "
            + ", ".join(f"{name} {_bytes(value)}" for name, value in largest),
            *uncertainty_lines(sim),
            *host_lines(sim),
            *pipeline_lines(sim),
            *planner_lines(sim),
        ]
    )


def host_lines(sim: StepSimulation) -> list[str]:
    """The host's part, when the program's data loading was measured: its time per step on
    the POD, the two throughputs it decides between, and a verdict when the host decides."""
    host = sim.host_compute_seconds
    if host <= 0:
        return []
    p = sim.profile
    lines = [
        f"  host: {_duration(host)} per step preparing each instance's samples on the POD's "
        f"hosts ({p.host_cpu_seconds_per_sample * 1e6:,.1f} us of CPU per sample measured "
        f"here, spread +/-{100 * p.host_cpu_relative_spread:.1f} % across its batches, "
        f"{max(p.host_workers, 1)} worker(s)); IPU-bound "
        f"{sim.ipu_bound_samples_per_second:,.0f} samples/s, host-bound "
        f"{sim.host_bound_samples_per_second:,.0f} samples/s"
    ]
    if sim.host_bound:
        lines.append(
            f"  HOST-BOUND: the hosts need {_duration(host)} per step but the IPUs only "
            f"{_duration(sim.simulated_step_seconds - sim.phases.get('host_compute', 0.0))}; "
            "more data-loader workers, more hosts (--host) or a cheaper loader would raise "
            "the throughput"
        )
    return lines
