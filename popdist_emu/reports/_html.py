"""A single run's ``report.html``: the simulated step and memory per IPU as pictures.

Written beside ``summary.json`` and ``trace.json`` by ``_report.write_reports``, so a person
can look instead of reading JSON. One self-contained page: the pictures are PNGs embedded as
``data:`` URIs (RFC 2397), with no script and nothing fetched from the network.

References:
    RFC 2397, "The 'data' URL scheme".
"""

from __future__ import annotations

import base64
import html
import os
import pathlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from contract import write_atomically
from hardware import StepSimulation
from popdist_emu.reports._confidence import uncertainty_html
from popdist_emu.reports._pipeline import (
    BALANCE_DEFINITION,
    BUBBLE_DEFINITION,
    bubble_text,
    pipeline_summary,
)
from popdist_emu.reports._planner import available_memory_summary, ipu_memories
from popdist_emu.reports._run_info import RunInfo

if TYPE_CHECKING:  # matplotlib is imported only to draw
    from popdist_emu.reports.plots import IpuMemoryBar

REPORT_FILE = "report.html"
STYLE = """
body { font-family: sans-serif; max-width: 1200px; margin: 1em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; min-width: 6em; }
img { max-width: 100%; display: block; margin: 0.5em 0 1.5em; }
.bad { color: #b00; font-weight: bold; } .ok { color: #070; }
code { background: #f4f4f4; padding: 1px 4px; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f4f4f4; padding: 6px; }
"""


def data_uri(png: bytes) -> str:
    """A PNG as a ``data:`` URI (RFC 2397), to embed in a page."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def table(
    header: Sequence[str], rows: Sequence[Sequence[object]], left: tuple[int, ...] = (0,)
) -> str:
    """An HTML table, values escaped; the columns in ``left`` are left-aligned (text)."""

    def cell(tag: str, i: int, value: object) -> str:
        return f'<{tag} class="{"l" if i in left else ""}">{html.escape(str(value))}</{tag}>'

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def page(title: str, body: str) -> str:
    """A complete HTML5 page with the report style."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def _provenance(run: RunInfo | None) -> str:
    if run is None:
        return ""
    return (
        f"<p>Made by <code>{html.escape(run.command)}</code> on {html.escape(run.date)} with "
        f"{html.escape(run.describe())}.</p>"
    )


def _pipeline_section(sim: StepSimulation) -> str:
    """The stages of a pipelined or sharded replica: blocks, IPU, time, stash and memory."""
    summary = pipeline_summary(sim)
    if summary is None:
        return ""
    mib, capacity = 2**20, sim.memory.capacity
    rows = [
        [
            stage["stage"],
            f"IPU {stage['ipu']}",
            ", ".join(stage["blocks"]),
            f"{stage['forward_seconds'] * 1e3:.4f}",
            f"{stage['backward_seconds'] * 1e3:.4f}",
            f"{stage['stash_bytes'] / mib:,.2f}",
            f"{stage['memory_total'] / mib:,.2f}",
            f"{100 * stage['memory_total'] / capacity:.1f}",
            "yes" if stage["fits_in_memory"] else "NO",
        ]
        for stage in summary["stages"]
    ]
    bubble = bubble_text(sim)
    title = "Pipeline" if summary["strategy"] == "pipelined" else "Sharded execution"
    recompute = " with recomputation" if summary["recomputation"] else ""
    return (
        f"<h2>{title}: {len(rows)} stages over {len(summary['ipus'])} IPUs{recompute}</h2>"
        + table(
            [
                "stage",
                "IPU",
                "blocks",
                "forward ms per micro-batch",
                "backward ms per micro-batch",
                "stash MiB",
                "its IPU's memory MiB",
                "% of IPU",
                "fits",
            ],
            rows,
            left=(1, 2),
        )
        + f"<p>{html.escape(bubble[:1].upper() + bubble[1:])}. "
        + f"{html.escape(BUBBLE_DEFINITION)}.</p>"
        + f"<p>Balance {summary['balance']:.2f}: {html.escape(BALANCE_DEFINITION)}</p>"
    )


def _memory_section(sim: StepSimulation) -> str:
    """Every IPU of replica 0: categories, liveness, tiles and the planner's choices."""
    from popdist_emu.reports.plots import KIB, MIB, ipu_memory_plot

    entries = available_memory_summary(sim)
    memories = dict(ipu_memories(sim))
    ipus: list[IpuMemoryBar] = [
        {
            "label": name,
            "categories": memories[name].categories,
            "worst_tile": entry["worst_tile_bytes"],
            "mean_tile": entry["mean_tile_bytes"],
        }
        for name, entry in entries.items()
    ]
    memory = sim.memory
    picture = ipu_memory_plot(ipus, memory.capacity, memory.tile_capacity)
    rows = []
    for name, entry in entries.items():
        total = memories[name].total
        rows.append(
            [
                name,
                f"{total / MIB:,.2f}",
                f"{100 * total / memory.capacity:.1f}",
                f"{entry['always_live_bytes'] / MIB:,.2f}",
                f"{entry['not_always_live_bytes'] / MIB:,.2f}",
                f"{entry['worst_tile_bytes'] / KIB:,.1f}",
                f"{entry['mean_tile_bytes'] / KIB:,.1f}",
                "/".join(f"{a:g}" for a in entry["available_memory_proportions"]) or "-",
                entry["planner"]["operations"] if entry["planner"] else "-",
                len(entry["phase_two_operations"]),
            ]
        )
    names = [c for c in memory.categories if any(m.categories[c] for m in memories.values())]
    by_category = [
        [c, *(f"{memories[name].categories[c] / MIB:,.3f}" for name in entries)] for c in names
    ]
    fits = all(m.fits for m in memories.values())
    verdict = '<span class="ok">fits</span>' if fits else '<span class="bad">DOES NOT FIT</span>'
    fullest = max(entries, key=lambda name: memories[name].total)
    return (
        f"<h2>Memory per IPU: the fullest, {fullest}, holds "
        f"{memories[fullest].total / MIB:,.1f} of {memory.capacity / MIB:,.1f} MiB ({verdict})"
        "</h2>"
        + f'<img alt="memory of every IPU and its fullest tile" src="{data_uri(picture)}">'
        + table(
            [
                "IPU",
                "MiB",
                "% of IPU",
                "always-live MiB",
                "not-always-live MiB",
                "fullest tile KiB",
                "mean tile KiB",
                "availableMemoryProportion",
                "matmuls and convolutions",
                "planned for minimum memory",
            ],
            rows,
        )
        + f"<p>A tile holds {memory.tile_capacity / KIB:,.0f} KiB; an IPU fits when its total "
        "fits its In-Processor-Memory and its fullest tile fits a tile.</p>"
        + "<h3>By category (MiB)</h3>"
        + table(["category", *entries], by_category)
        + _phase_two(entries)
    )


def _phase_two(entries: dict) -> str:
    """The operations the planner had to plan for minimum memory (phase two), per IPU."""
    items = [
        f"<li>{html.escape(name)}: "
        + ", ".join(f"<code>{html.escape(op)}</code>" for op in entry["phase_two_operations"])
        + "</li>"
        for name, entry in entries.items()
        if entry["phase_two_operations"]
    ]
    heading = "<h3>Planned for minimum memory (the planner's phase two)</h3>"
    if not items:
        return (
            heading + "<p>None: every matmul and convolution got a plan within its "
            "availableMemoryProportion.</p>"
        )
    return (
        heading + "<p>These operations did not fit their availableMemoryProportion and were "
        "planned for the least temporary memory, which costs cycles (Poplar warns of each):</p>"
        + f"<ul>{''.join(items)}</ul>"
    )


def _host_section(sim: StepSimulation) -> str:
    """The host's part: its data preparation (when measured), the host link and the sync."""
    p = sim.profile
    rows: list[Sequence[object]] = []
    verdict = ""
    if sim.host_compute_seconds > 0:
        rows += [
            [
                "data preparation per step (each instance, on the POD's hosts)",
                f"{sim.host_compute_seconds * 1e3:.4f} ms",
            ],
            [
                "of which the step waits for (host_compute)",
                f"{sim.phases.get('host_compute', 0.0) * 1e3:.4f} ms",
            ],
            ["CPU per sample, measured here", f"{p.host_cpu_seconds_per_sample * 1e6:,.2f} us"],
            ["loader workers", max(p.host_workers, 1)],
            ["IPU-bound throughput", f"{sim.ipu_bound_samples_per_second:,.0f} samples/s"],
            ["host-bound throughput", f"{sim.host_bound_samples_per_second:,.0f} samples/s"],
        ]
        if sim.host_bound:
            verdict = (
                '<p class="bad">Host-bound: the hosts, not the IPUs, decide the throughput. '
                "More data-loader workers, more hosts or a cheaper loader would raise it.</p>"
            )
    rows += [
        ["host link busy per step", f"{sim.host_io_seconds * 1e3:.4f} ms"],
        [
            "host IO exposed per step (not hidden by prefetch)",
            f"{sim.host_io_exposed_seconds * 1e3:.4f} ms",
        ],
        ["prefetch depth", f"{sim.prefetch_depth} micro-batches"],
        ["bytes from the host per micro-batch and replica", f"{p.host_bytes_per_micro_batch:,}"],
        [
            "bytes to the host per returned micro-batch and replica (output mode)",
            f"{p.host_output_bytes_per_micro_batch:,}, {p.outputs_per_step} of "
            f"{p.gradient_accumulation * p.device_iterations} micro-batches returned",
        ],
        ["host synchronisation per step", f"{sim.phases.get('host_sync', 0.0) * 1e3:.4f} ms"],
    ]
    return "<h2>Host side</h2>" + verdict + table(["figure", "value"], rows)


def run_report_html(simulation: StepSimulation, run: RunInfo | None = None) -> str:
    """The page of one simulated configuration.

    Args:
        simulation: the simulated step.
        run: the command, date and versions that made it (None: not shown).
    """
    # Here, not at the top: every instance imports the reports, one draws with matplotlib
    # (0.35 s to import, measured here), and only with --report-dir.
    from popdist_emu.reports.plots import SHOWN_SECONDS, single_phases_plot

    sim, p, layout = simulation, simulation.profile, simulation.layout
    config: list[list[object]] = [
        ["system", f"{sim.system.name} ({sim.system.ipu.name})"],
        ["replicas x IPUs per replica", f"{layout.num_replicas} x {layout.ipus_per_replica}"],
        ["instances", layout.num_instances],
        ["model", p.name],
        [
            "micro-batch x gradient accumulation x device iterations",
            f"{p.micro_batch_size} x {p.gradient_accumulation} x {p.device_iterations}",
        ],
        ["samples per step", f"{sim.samples_per_step:,}"],
        ["simulated step", f"{sim.simulated_step_seconds * 1e3:.3f} ms"],
        ["throughput", f"{sim.samples_per_second:,.0f} samples/s"],
    ]
    step = sim.simulated_step_seconds
    phases = [
        [name, f"{seconds * 1e3:.4f}", f"{100 * seconds / step:.1f}" if step > 0 else "-"]
        for name, seconds in sim.phases.items()
        if seconds > SHOWN_SECONDS
    ]
    body = (
        f"<h1>Simulated step: {html.escape(p.name)} on {html.escape(sim.system.name)}</h1>"
        + _provenance(run)
        + table(["configuration", "value"], config)
        + uncertainty_html(sim)
        + "<h2>Phases of one step</h2>"
        + f'<img alt="phases of one step" src="{data_uri(single_phases_plot(sim.phases, step))}">'
        + table(["phase", "ms per step", "% of step"], phases)
        + _pipeline_section(sim)
        + _memory_section(sim)
        + _host_section(sim)
        + "<p>Beside this page: <code>summary.json</code> (these figures) and "
        + "<code>trace.json</code> (the step's timeline; open it in ui.perfetto.dev).</p>"
    )
    return page(f"popdist-emu: {p.name} on {sim.system.name}", body)


def write_run_report(
    simulation: StepSimulation, report_dir: str | os.PathLike, run: RunInfo | None = None
) -> pathlib.Path:
    """Writes ``report.html`` into ``report_dir`` (which exists); returns its path."""
    path = pathlib.Path(report_dir) / REPORT_FILE
    write_atomically(path, run_report_html(simulation, run))
    return path
