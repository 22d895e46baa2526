"""The outputs of ``poprun-emu-scaling``: report.html, PNG plots, scaling.json, scaling.csv.

``report.html`` is one page with no script and nothing fetched from the network: the plots
are PNG files beside it, referenced by relative links, so the folder can be moved or zipped
as a whole. Every file is written through ``popdist_emu._files`` (temporary name, renamed).
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from contract import write_atomically
from hardware import load_calibration
from popdist_emu.reports import html_page as page
from popdist_emu.reports import html_table as table
from popdist_emu.reports import plots as plots
from popdist_emu.scaling._analysis import EFFICIENCY_THRESHOLDS, LAWS
from popdist_emu.scaling._table import csv_columns, csv_record, plotted_phases

REPORT_FILE = "report.html"
JSON_FILE = "scaling.json"
CSV_FILE = "scaling.csv"
PLOTS = {
    "throughput": "throughput.png",
    "efficiency": "efficiency.png",
    "phases": "phases.png",
    "memory": "memory.png",
}
LAW_NAMES = {"amdahl": "Amdahl's law", "gustafson": "Gustafson's law"}


def _good(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["replicas"])


def _simulated(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(
        (r for r in rows if r["samples_per_second"] is not None), key=lambda r: r["replicas"]
    )


def _plot_series(series: Sequence[Mapping[str, Any]]) -> list[plots.ScalingSeries]:
    out = []
    for s in series:
        good, simulated = _good(s["rows"]), _simulated(s["rows"])
        entry_sim: plots.SimulatedSeries = {
            "label": s["label"],
            "replicas": [r["replicas"] for r in simulated],
            "phases": [
                plotted_phases({"summary": {"phases": r["phases"]}, "link_tiers": r["link_tiers"]})
                for r in simulated
            ],
            "memory": [r["memory_per_ipu"] for r in simulated],
            "capacity": [r["memory_capacity_per_ipu"] for r in simulated],
        }
        entry: plots.ScalingSeries = {
            "label": s["label"],
            "replicas": [r["replicas"] for r in good],
            "throughput": [r["samples_per_second"] for r in good],
            "throughput_low": [r["samples_per_second_low"] for r in good],
            "throughput_high": [r["samples_per_second_high"] for r in good],
            "efficiency": [r["efficiency"] for r in good],
            "fit_replicas": [],  # no fitted curve unless the fit below is good
            "fit_throughput": [],
            "fit_label": "fit",
            "simulated": entry_sim,
        }
        fit = s["analysis"]["fit"]
        if fit and good and not fit.get("poor"):
            n0, x0 = good[0]["replicas"], good[0]["samples_per_second"]
            grid = np.geomspace(n0, good[-1]["replicas"], 50)
            entry["fit_replicas"] = grid.tolist()
            entry["fit_throughput"] = (
                x0 * LAWS[fit["law"]](grid / n0, fit["serial_fraction"])
            ).tolist()
            entry["fit_label"] = f"{LAW_NAMES[fit['law']]} fit (s = {fit['serial_fraction']:.2e})"
        out.append(entry)
    return out


def _fmt(value: Any, kind: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if kind == "pct":
        return f"{100 * value:.1f} %"
    if kind == "ms":
        return f"{value * 1e3:.3f}"
    if kind == "int":
        return f"{round(value):,}"
    if kind == "mib":
        return f"{value / 2**20:,.1f}"
    if kind == "e":
        return f"{value:.3e}"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def narrative(series: Mapping[str, Any]) -> list[str]:
    """Sentences on what limits the scaling of one series, generated from its analysis."""
    a, rows = series["analysis"], series["rows"]
    good = _good(rows)
    lines = []
    if series.get("error"):
        lines.append(f"The program did not produce the points: {series['error']}")
    bad = [
        f"{r['replicas']:,} replicas: {r['status'].replace('_', ' ')}: {r['reason']}"
        for r in rows
        if r["status"] != "ok"
    ]
    if not good:
        return [*lines, "No point of this series was simulated and fits in memory.", *bad]
    first, last = good[0], good[-1]
    if len(good) > 1:
        lines.append(
            f"From {first['replicas']:,} to {last['replicas']:,} replicas the simulated "
            f"throughput grows from {first['samples_per_second']:,.0f} to "
            f"{last['samples_per_second']:,.0f} "
            f"samples/s: a speed-up of {last['speedup']:.2f} on "
            f"{last['replicas'] / first['replicas']:g}x the replicas, a parallel efficiency "
            f"of {100 * last['efficiency']:.1f} %."
        )
    batches = sorted({r["global_batch"] for r in good})
    if a["law"] == "amdahl" and len(batches) > 1:
        lines.append(
            f"The global batch changes across the points ({batches[0]:,} to {batches[-1]:,}), "
            "as given by --global-batch; the speed-up is the ratio of throughputs."
        )
    fit = a["fit"]
    if fit:
        err = f" ± {fit['stderr']:.1e}" if fit["stderr"] is not None else ""
        lines.append(
            f"{LAW_NAMES[fit['law']]} fits a serial fraction s = {fit['serial_fraction']:.3e}"
            f"{err} (RMS residual of the speed-up {fit['rms_residual']:.3g} over "
            f"{fit['points']} points)."
        )
        if fit.get("poor"):
            lines.append(
                f"POOR FIT: {LAW_NAMES[fit['law']]} misses these points by "
                f"{100 * fit['relative_rms_residual']:.0f} % of the mean speed-up (RMS), so it "
                "does not describe them; where its curve crosses an efficiency is not stated."
            )
    for key, below in a["efficiency_below"].items():
        sim, fitted = below["first_simulated_replicas"], below["fitted_replicas"]
        where = (
            f"falls below {key} at {sim:,} replicas"
            if sim
            else f"stays above {key} up to {last['replicas']:,} replicas"
        )
        law = f"; the fitted law crosses it at about {fitted:,.0f} replicas" if fitted else ""
        lines.append(f"Parallel efficiency {where}{law}.")
    name = a["fastest_growing_phase"]
    if name:
        share = a["fastest_growing_share"]
        lines.append(
            f"The phase whose share of the step grows fastest is {name}: from "
            f"{100 * share['first']:.1f} % of the step at {first['replicas']:,} replicas to "
            f"{100 * share['last']:.1f} % at {last['replicas']:,}. It is the constant or "
            f"slowed-down process that limits the scaling (memory and performance guide, "
            f"section 7.3)."
        )
    elif len(good) > 1:
        lines.append("No phase's share of the step grows with the replica count.")
    return lines + _extrapolated(rows) + bad


def _extrapolated(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One sentence per kind of extrapolation, naming the points it concerns."""
    by_reason: dict[str, list[int]] = {}
    for r in rows:
        for line in r.get("extrapolations", []):
            key = line.split(":", 1)[1].strip() if line[0].isdigit() else line
            by_reason.setdefault(key, []).append(r["replicas"])
    return [
        f"EXTRAPOLATED at {', '.join(f'{n:,}' for n in replicas)} replicas: {reason}"
        for reason, replicas in by_reason.items()
    ]


def _band_family(series: Sequence[Mapping[str, Any]]) -> str:
    """The fit whose rows give the points' band (their ``band_family``: chosen by the
    program's structure or ``--calibration-family``; "" for the shared fit)."""
    rows = [r for s in series for r in _good(s["rows"])]
    return str(rows[0].get("band_family", "")) if rows else ""


def _published_rows(
    series: Sequence[Mapping[str, Any]], published: Sequence[Mapping[str, Any]]
) -> tuple[list[list[str]], list[list[str]]]:
    """The published points against the predictions: the calibration rows (the parameters
    were fitted on them, so their error is no check; their leave-one-out error is), and the
    held-out rows, which are checks, against the rows of the fit the points lean on."""
    calibration = load_calibration(family=_band_family(series))
    fitted, held_out = [], []
    for m in published:
        for s in series:
            match = [r for r in _good(s["rows"]) if r["replicas"] == int(m["replicas"])]
            if not match:
                continue
            r = match[0]
            error = r["samples_per_second"] / float(m["throughput"]) - 1
            row = [
                m["label"],
                s["label"],
                f"{int(m['replicas']):,}",
                f"{float(m['throughput']):,.0f}",
                f"{r['samples_per_second']:,.0f}",
                f"{r['samples_per_second_low']:,.0f} to {r['samples_per_second_high']:,.0f}",
                f"{100 * error:+.1f} %",
            ]
            calibrated = calibration.row_for(int(m["replicas"]), float(m["throughput"]))
            if calibrated is None:
                held_out.append(row)
            else:
                fitted.append([*row, f"{100 * calibrated.leave_one_out_error:+.1f} %"])
    return fitted, held_out


def _point_table(rows: Sequence[Mapping[str, Any]]) -> str:
    header = [
        "series",
        "system",
        "replicas",
        "instances",
        "IPUs",
        "GA",
        "global batch",
        "step (ms)",
        "samples/s",
        "band",
        "speed-up",
        "efficiency",
        "Karp-Flatt e",
        "memory/IPU (MiB)",
        "status",
    ]
    body = []
    for r in rows:
        status = "ok" if r["status"] == "ok" else f"{r['status']}: {r['reason']}"
        body.append(
            [
                r["series"],
                r["system"],
                _fmt(r["replicas"], "int"),
                _fmt(r["instances"], "int"),
                _fmt(r["ipus"], "int"),
                _fmt(r["gradient_accumulation"]),
                _fmt(r["global_batch"], "int"),
                _fmt(r["simulated_step_seconds"], "ms"),
                _fmt(r["samples_per_second"], "int"),
                (
                    f"{_fmt(r['samples_per_second_low'], 'int')} to "
                    f"{_fmt(r['samples_per_second_high'], 'int')}"
                    if r["samples_per_second_low"] is not None
                    else "-"
                ),
                _fmt(r["speedup"]),
                _fmt(r["efficiency"], "pct"),
                _fmt(r["karp_flatt"], "e"),
                _fmt(r["memory_per_ipu_total"], "mib"),
                status,
            ]
        )
    return table(header, body, left=(0, 1, len(header) - 1))


def _phase_table(rows: Sequence[Mapping[str, Any]]) -> str:
    simulated = [r for r in rows if r["simulated_step_seconds"]]
    names: list[str] = []
    phases = []
    for r in simulated:
        ph = plotted_phases({"summary": {"phases": r["phases"]}, "link_tiers": r["link_tiers"]})
        phases.append(ph)
        names += [k for k, v in ph.items() if v > plots.SHOWN_SECONDS and k not in names]
    body = [
        [r["series"], _fmt(r["replicas"], "int")] + [_fmt(ph.get(k, 0.0), "ms") for k in names]
        for r, ph in zip(simulated, phases, strict=True)
    ]
    return table(["series", "replicas", *(f"{k} (ms)" for k in names)], body)


def report_html(doc: Mapping[str, Any]) -> str:
    """The page: command, narrative, fits, plots and tables (see the module docstring)."""
    series, published = doc["series"], doc["published"]
    parts = [
        f"<h1>Scaling of {html.escape(doc['model'] or 'the program')}: "
        f"{html.escape(doc['mode'])} scaling</h1>",
        "<p>Made by:</p><pre><code>" + html.escape(doc["command"]) + "</code></pre>",
        f"<p>Sweep time {doc['sweep_seconds']:.1f} s for {doc['num_points']} points "
        f"({len(series)} series, one compile each); the slowest point took "
        f"{_fmt(doc.get('max_point_evaluation_seconds'), 'ms')} ms after the compile.</p>",
    ]
    for s in series:
        parts.append(f"<h2>What limits the scaling: {html.escape(s['label'])}</h2><ul>")
        parts += [f"<li>{html.escape(line)}</li>" for line in narrative(s)]
        parts.append("</ul>")
    fits = []
    for s in series:
        f, a = s["analysis"]["fit"], s["analysis"]
        if f:
            e80 = a["efficiency_below"].get("80 %", {})
            e50 = a["efficiency_below"].get("50 %", {})
            fits.append(
                [
                    s["label"],
                    LAW_NAMES[f["law"]],
                    _fmt(f["serial_fraction"], "e"),
                    _fmt(f["stderr"], "e"),
                    _fmt(f["rms_residual"]),
                    _fmt(e80.get("first_simulated_replicas"), "int"),
                    _fmt(e80.get("fitted_replicas"), "int"),
                    _fmt(e50.get("first_simulated_replicas"), "int"),
                    _fmt(e50.get("fitted_replicas"), "int"),
                    a["fastest_growing_phase"] or "-",
                    "NO (poor fit)" if f.get("poor") else "yes",
                ]
            )
    if fits:
        parts.append("<h2>Fits</h2>")
        parts.append(
            table(
                [
                    "series",
                    "law",
                    "serial fraction s",
                    "std. error",
                    "RMS residual",
                    "E < 80 % at (simulated)",
                    "E < 80 % at (fit)",
                    "E < 50 % at (simulated)",
                    "E < 50 % at (fit)",
                    "fastest-growing phase",
                    "describes the points",
                ],
                fits,
            )
        )
    fitted, held_out = _published_rows(series, published)
    header = [
        "published",
        "series",
        "replicas",
        "published samples/s",
        "predicted samples/s",
        "band",
        "error",
    ]
    calibration = load_calibration(family=_band_family(series))
    spread = (
        f"&plusmn;{100 * calibration.relative_spread:.1f} %, the {html.escape(calibration.method)} "
        f"({html.escape(calibration.data)})"
    )
    if fitted or held_out:
        parts.append("<h2>Published against predicted</h2>")
        parts.append(
            f"<p>Every prediction carries a band of {spread}: how far a configuration "
            "predicted by a fit made without it was off.</p>"
        )
    if fitted:
        parts.append(
            "<h3>Calibration rows (fitted: the model's parameters were fitted on these, so "
            "their error is no check; the leave-one-out error is)</h3>"
        )
        parts.append(table([*header, "leave-one-out error"], fitted))
    if held_out:
        parts.append("<h3>Held-out rows (not used for fitting: these are checks)</h3>")
        parts.append(table(header, held_out))
    titles = {
        "throughput": "Throughput against replicas",
        "efficiency": "Parallel efficiency",
        "phases": "Phases of one step per point",
        "memory": "Memory per IPU against capacity",
    }
    for key, name in PLOTS.items():
        parts.append(f"<h2>{titles[key]}</h2>")
        parts.append(f'<img src="{name}" alt="{html.escape(titles[key])}">')
    parts.append("<h2>Points</h2>")
    parts.append(_point_table([r for s in series for r in s["rows"]]))
    parts.append("<h2>Phase seconds per step</h2>")
    parts.append(_phase_table([r for s in series for r in s["rows"]]))
    parts.append(
        f'<p>Every figure is in <a href="{JSON_FILE}">{JSON_FILE}</a> (with the model\'s '
        f'parameters) and <a href="{CSV_FILE}">{CSV_FILE}</a>.</p>'
    )
    return page(f"Scaling: {doc['model']}", "".join(parts))


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """``scaling.csv``: one row per point."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=csv_columns(rows), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow(csv_record(r))
    return buffer.getvalue()


def write_outputs(doc: Mapping[str, Any], out: str | pathlib.Path) -> dict[str, pathlib.Path]:
    """Writes every output into ``out`` (created); returns name -> path."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    series = _plot_series(doc["series"])
    simulated = [s["simulated"] for s in series]
    pngs = {
        "throughput": plots.throughput_plot(series, doc["published"]),
        "efficiency": plots.efficiency_plot(series, EFFICIENCY_THRESHOLDS),
        "phases": plots.phases_plot(simulated),
        "memory": plots.memory_plot(simulated),
    }
    paths = {}
    for key, data in pngs.items():
        paths[key] = out / PLOTS[key]
        write_atomically(paths[key], data)
    rows = [r for s in doc["series"] for r in s["rows"]]
    paths["json"] = out / JSON_FILE
    write_atomically(paths["json"], json.dumps(doc, indent=1, default=_json_default) + "\n")
    paths["csv"] = out / CSV_FILE
    write_atomically(paths["csv"], csv_text(rows))
    paths["html"] = out / REPORT_FILE
    write_atomically(paths["html"], report_html(doc))
    return paths


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
