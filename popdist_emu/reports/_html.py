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

from hardware import StepSimulation
from popdist_emu._files import write_atomically

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


def run_report_html(simulation: StepSimulation) -> str:
    """The page of one simulated configuration."""
    # Here, not at the top: every instance imports the reports, one draws with matplotlib
    # (0.35 s to import, measured here), and only with --report-dir.
    from popdist_emu.reports.plots import SHOWN_SECONDS, single_memory_plot, single_phases_plot

    sim, p, layout, memory = simulation, simulation.profile, simulation.layout, simulation.memory
    mib = 2**20
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
        [
            "host IO exposed / busy",
            f"{sim.host_io_exposed_seconds * 1e3:.3f} / {sim.host_io_seconds * 1e3:.3f} ms",
        ],
    ]
    step = sim.simulated_step_seconds
    phases = [
        [name, f"{seconds * 1e3:.4f}", f"{100 * seconds / step:.1f}" if step > 0 else "-"]
        for name, seconds in sim.phases.items()
        if seconds > SHOWN_SECONDS
    ]
    categories = [
        [name, f"{value / mib:,.2f}", f"{100 * value / memory.capacity:.1f}"]
        for name, value in memory.categories.items()
        if value > 0
    ]
    fits = (
        '<span class="ok">fits</span>' if memory.fits else '<span class="bad">DOES NOT FIT</span>'
    )
    body = (
        f"<h1>Simulated step: {html.escape(p.name)} on {html.escape(sim.system.name)}</h1>"
        + table(["configuration", "value"], config)
        + "<h2>Phases of one step</h2>"
        + f'<img alt="phases of one step" src="{data_uri(single_phases_plot(sim.phases, step))}">'
        + table(["phase", "ms per step", "% of step"], phases)
        + f"<h2>Memory per IPU: {memory.total / mib:,.1f} of {memory.capacity / mib:,.1f} MiB "
        + f"({fits})</h2>"
        + '<img alt="memory per IPU" src="'
        + f'{data_uri(single_memory_plot(memory.categories, memory.capacity))}">'
        + table(["category", "MiB per IPU", "% of capacity"], categories)
        + "<p>Beside this page: <code>summary.json</code> (these figures) and "
        + "<code>trace.json</code> (the step's timeline; open it in ui.perfetto.dev).</p>"
    )
    return page(f"popdist-emu: {p.name} on {sim.system.name}", body)


def write_run_report(simulation: StepSimulation, report_dir: str | os.PathLike) -> pathlib.Path:
    """Writes ``report.html`` into ``report_dir`` (which exists); returns its path."""
    path = pathlib.Path(report_dir) / REPORT_FILE
    write_atomically(path, run_report_html(simulation))
    return path
