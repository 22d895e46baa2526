"""The pictures of the scaling report and of a single run's report, as PNG bytes.

matplotlib's ``Figure`` drawn on an Agg canvas (no pyplot, so no global backend is touched
in the program that writes a report; no display, no GUI toolkit): every function
takes plain data and returns the PNG's bytes, so the caller decides where they go (a file
beside ``report.html`` or a ``data:`` URI inside it).

References:
    matplotlib documentation: "Embedding in a web application server" (``Figure`` without
    pyplot), "Backends" (Agg renders PNGs without a display),
    ``Axes.loglog``, ``Axes.bar`` (stacked with ``bottom=``), ``Figure.savefig``.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Mapping, Sequence
from typing import TypedDict

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from contract import TIER_PHASES


class SimulatedSeries(TypedDict):
    """One series' simulated points, for the phase and memory charts."""

    label: str
    replicas: list[int]
    phases: list[dict[str, float]]  # per point: phase -> seconds of one step
    memory: list[dict[str, int]]  # per point: category -> bytes per IPU
    capacity: list[int]  # per point: bytes per IPU


class ScalingSeries(TypedDict):
    """One series of the scaling report's charts: its valid points, the fitted law's curve
    (empty when there is no good fit) and ``simulated`` for the phase and memory charts."""

    label: str
    replicas: list[int]  # of the valid points
    throughput: list[float]
    throughput_low: list[float]  # the calibration's uncertainty band
    throughput_high: list[float]
    efficiency: list[float]
    fit_replicas: list[float]
    fit_throughput: list[float]
    fit_label: str
    simulated: SimulatedSeries


class IpuMemoryBar(TypedDict):
    """One IPU's bars of :func:`ipu_memory_plot`."""

    label: str
    categories: dict[str, int]  # category -> bytes
    worst_tile: int  # bytes
    mean_tile: int  # bytes


MIB = 2**20
KIB = 2**10
# Phases shorter than this are rounding noise of the timeline (e.g. 1e-19 s of host IO).
SHOWN_SECONDS = 1e-9
_DPI = 80
# One colour per phase and per memory category, the same in every chart of both reports
# (matplotlib's "tab20" colours): the IPU's work in blues, idle time in greys, collectives in
# reds and purples, the update in greens, the host in browns.
COLOURS = {
    "compute": "#1f77b4",
    "gradient_accumulation": "#aec7e8",
    "pipeline_bubble": "#c7c7c7",
    "allreduce": "#d62728",
    "reduce_scatter": "#ff9896",
    "all_gather": "#e377c2",
    "broadcast": "#f7b6d2",
    TIER_PHASES["ipu_links"]: "#ff7f0e",
    TIER_PHASES["gw_links"]: "#9467bd",
    "weight_update": "#2ca02c",
    "streaming": "#98df8a",
    "host_io": "#8c564b",
    "host_compute": "#c49c94",
    "host_sync": "#7f7f7f",
    # memory categories (hardware.CATEGORIES)
    "weights": "#1f77b4",
    "optimizer_state": "#2ca02c",
    "gradient_accumulators": "#98df8a",
    "code": "#9467bd",
    "exchange_code": "#c5b0d5",
    "stream_buffers": "#8c564b",
    "activations": "#ff7f0e",
    "gradients": "#d62728",
    "temporaries": "#bcbd22",
}
_SPARE = ("#17becf", "#9edae5", "#dbdb8d", "#ffbb78", "#c49c94", "#f7b6d2")


def colour(name: str) -> str:
    """The colour of a phase or memory category; a name without one gets a spare colour
    chosen from the name itself, so it too is the same in every chart."""
    return COLOURS.get(name) or _SPARE[zlib.crc32(name.encode()) % len(_SPARE)]


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    FigureCanvasAgg(fig)
    fig.savefig(buffer, format="png", dpi=_DPI, bbox_inches="tight")
    return buffer.getvalue()


def _log2_axis(ax: Axes, replicas: Sequence[int]) -> None:
    ticks = sorted(set(int(n) for n in replicas))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{n:,}" for n in ticks], rotation=45 if len(ticks) > 6 else 0)
    ax.minorticks_off()


def throughput_plot(series: Sequence[ScalingSeries], published: Sequence[Mapping]) -> bytes:
    """Throughput against replicas (log-log), with the ideal line, the fit and measurements.

    Args:
        series: per series ``label``, ``replicas``, ``throughput`` (valid points only),
            optionally ``throughput_low``/``throughput_high`` (the uncertainty band, drawn
            shaded) and ``fit_replicas``/``fit_throughput`` (the fitted law).
        published: measured points: ``replicas``, ``throughput``, ``label``.
    """
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    all_replicas: list[int] = []
    for i, s in enumerate(series):
        color = f"C{i}"
        n, x = list(s["replicas"]), list(s["throughput"])
        if not n:
            continue
        all_replicas += n
        ax.plot(n, x, "o-", color=color, label=f"{s['label']} (simulated)")
        if s.get("throughput_low") and all(v is not None for v in s["throughput_low"]):
            ax.fill_between(
                n,
                s["throughput_low"],
                s["throughput_high"],
                color=color,
                alpha=0.15,
                linewidth=0,
                label=f"{s['label']} uncertainty (calibration leave-one-out)",
            )
        ideal = [x[0] * m / n[0] for m in n]
        ax.plot(n, ideal, ":", color=color, alpha=0.6, label=f"{s['label']} ideal (linear)")
        if s.get("fit_replicas"):
            ax.plot(
                s["fit_replicas"],
                s["fit_throughput"],
                "--",
                color=color,
                alpha=0.8,
                label=f"{s['label']} {s.get('fit_label', 'fit')}",
            )
    for j, m in enumerate(published):
        ax.plot(
            [m["replicas"]],
            [m["throughput"]],
            marker="*",
            markersize=14,
            linestyle="none",
            color="black" if j == 0 else "dimgray",
            label="published" if j == 0 else None,
        )
        ax.annotate(
            m["label"],
            (m["replicas"], m["throughput"]),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=8,
        )
        all_replicas.append(int(m["replicas"]))
    ax.set_yscale("log")
    if all_replicas:
        _log2_axis(ax, all_replicas)
    ax.set_xlabel("replicas")
    ax.set_ylabel("samples per second")
    ax.set_title("Throughput against replicas")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def efficiency_plot(series: Sequence[ScalingSeries], thresholds: Sequence[float]) -> bytes:
    """Parallel efficiency against replicas, with the threshold lines (80 %, 50 %)."""
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    all_replicas: list[int] = []
    for i, s in enumerate(series):
        if s["replicas"]:
            all_replicas += list(s["replicas"])
            ax.plot(
                s["replicas"],
                [100 * e for e in s["efficiency"]],
                "o-",
                color=f"C{i}",
                label=s["label"],
            )
    for t in thresholds:
        ax.axhline(100 * t, color="gray", linestyle="--", linewidth=1)
        ax.annotate(
            f"{100 * t:.0f} %",
            (0.01, 100 * t),
            xycoords=("axes fraction", "data"),
            xytext=(0, 3),
            textcoords="offset points",
            fontsize=8,
            color="gray",
        )
    if all_replicas:
        _log2_axis(ax, all_replicas)
    ax.set_ylim(0, 110)
    ax.set_xlabel("replicas")
    ax.set_ylabel("parallel efficiency (%)")
    ax.set_title("Parallel efficiency (speed-up / relative replicas)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def _stacked(
    ax: Axes,
    labels: Sequence[str],
    stacks: Sequence[Mapping[str, float]],
    scale: float,
    least: float,
) -> list[float]:
    names: list[str] = []
    for stack in stacks:
        names += [k for k, v in stack.items() if v > least and k not in names]
    bottom = [0.0] * len(stacks)
    for name in names:
        values = [stack.get(name, 0.0) * scale for stack in stacks]
        ax.bar(labels, values, bottom=bottom, label=name, color=colour(name))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    return bottom


def phases_plot(series: Sequence[SimulatedSeries]) -> bytes:
    """Stacked phase seconds of one step per point, one panel per series.

    Args:
        series: per series ``label``, ``replicas`` and ``phases`` (phase -> seconds, one
            mapping per point), for the points that have a simulation.
    """
    shown = [s for s in series if s["replicas"]]
    fig = Figure(figsize=(8, 3.6 * max(len(shown), 1)), layout="constrained")
    axes = fig.subplots(max(len(shown), 1), 1, squeeze=False)[:, 0]
    for ax, s in zip(axes, shown, strict=False):
        labels = [f"{n:,}" for n in s["replicas"]]
        _stacked(ax, labels, s["phases"], 1e3, SHOWN_SECONDS)
        ax.set_xlabel("replicas")
        ax.set_ylabel("ms per step")
        ax.set_title(f"Phases of one step: {s['label']}")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)


def memory_plot(series: Sequence[SimulatedSeries]) -> bytes:
    """Memory per IPU by category per point against the IPU's capacity, one panel per series.

    Args:
        series: per series ``label``, ``replicas``, ``memory`` (category -> bytes per
            point) and ``capacity`` (bytes per point).
    """
    shown = [s for s in series if s["replicas"]]
    fig = Figure(figsize=(8, 3.6 * max(len(shown), 1)), layout="constrained")
    axes = fig.subplots(max(len(shown), 1), 1, squeeze=False)[:, 0]
    for ax, s in zip(axes, shown, strict=False):
        labels = [f"{n:,}" for n in s["replicas"]]
        _stacked(ax, labels, s["memory"], 1 / MIB, 0)
        ax.plot(
            labels, [c / MIB for c in s["capacity"]], "k_", markersize=30, mew=2, label="capacity"
        )
        ax.set_xlabel("replicas")
        ax.set_ylabel("MiB per IPU")
        ax.set_title(f"Memory per IPU: {s['label']}")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)


def single_phases_plot(phases: Mapping[str, float], step_seconds: float) -> bytes:
    """One run's phases as horizontal bars (ms), with the simulated step for scale."""
    items = [(k, v) for k, v in phases.items() if v > SHOWN_SECONDS]
    fig = Figure(figsize=(7, 0.45 * (len(items) + 1) + 1), layout="constrained")
    ax = fig.subplots()
    names = [k for k, _ in items] + ["simulated step"]
    values = [v * 1e3 for _, v in items] + [step_seconds * 1e3]
    colors = [colour(k) for k, _ in items] + ["black"]
    ax.barh(names, values, color=colors)
    ax.invert_yaxis()
    ax.set_xlabel("ms per step")
    ax.set_title("Phases of one step (busy time; collectives and host IO as exposed)")
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def _bar_scale(largest: float, capacity: float) -> float:
    """The axis limit of bars against a capacity: the capacity when the fullest bar is a
    visible share of it, else the bars' own scale (each bar then states its share), so a
    3 MiB bar is not a hairline against 858 MiB."""
    return 1.05 * max(capacity, largest) if largest >= 0.2 * capacity else 1.3 * largest or 1.0


def ipu_memory_plot(ipus: Sequence[IpuMemoryBar], capacity: float, tile_capacity: float) -> bytes:
    """Memory of every IPU of a replica: categories against the IPU's capacity, and the
    fullest tile against the mean tile and a tile's capacity.

    Args:
        ipus: per IPU ``label``, ``categories`` (category -> bytes), ``worst_tile`` and
            ``mean_tile`` (bytes).
        capacity: bytes of In-Processor-Memory per IPU.
        tile_capacity: bytes per tile.
    """
    fig = Figure(figsize=(11, 1.2 + 0.55 * len(ipus)), layout="constrained")
    ax, tiles = fig.subplots(1, 2, width_ratios=(3, 2))
    labels = [str(ipu["label"]) for ipu in ipus]
    totals = [sum(ipu["categories"].values()) for ipu in ipus]
    names: list[str] = []
    for ipu in ipus:
        names += [k for k, v in ipu["categories"].items() if v > 0 and k not in names]
    left = [0.0] * len(ipus)
    for name in names:
        values = [ipu["categories"].get(name, 0) / MIB for ipu in ipus]
        ax.barh(labels, values, left=left, color=colour(name), label=name)
        left = [a + b for a, b in zip(left, values, strict=True)]
    limit = _bar_scale(max(totals) / MIB, capacity / MIB)
    ax.set_xlim(0, limit)
    if capacity / MIB <= limit:
        ax.axvline(capacity / MIB, color="black", linewidth=2, label="capacity")
    for y, total in enumerate(totals):
        ax.annotate(
            f" {total / MIB:,.1f} MiB, {100 * total / capacity:.1f} %",
            (total / MIB, y),
            va="center",
            fontsize=8,
        )
    ax.invert_yaxis()
    ax.set_xlabel("MiB")
    ax.set_title(f"Memory per IPU, of {capacity / MIB:,.0f} MiB each")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.25), ncol=5)
    worst = [ipu["worst_tile"] / KIB for ipu in ipus]
    mean = [ipu["mean_tile"] / KIB for ipu in ipus]
    rows = list(range(len(ipus)))
    tiles.barh([i - 0.2 for i in rows], worst, height=0.4, color="#d62728", label="fullest tile")
    tiles.barh([i + 0.2 for i in rows], mean, height=0.4, color="#aec7e8", label="mean tile")
    tile_limit = _bar_scale(max(worst), tile_capacity / KIB)
    tiles.set_xlim(0, tile_limit)
    if tile_capacity / KIB <= tile_limit:
        tiles.axvline(tile_capacity / KIB, color="black", linewidth=2, label="tile capacity")
    for i, value in enumerate(worst):
        tiles.annotate(
            f" {100 * value * KIB / tile_capacity:.1f} %", (value, i - 0.2), va="center", fontsize=8
        )
    tiles.set_yticks(rows, labels)
    tiles.invert_yaxis()
    tiles.set_xlabel("KiB")
    tiles.set_title(f"Tiles, of {tile_capacity / KIB:,.0f} KiB each")
    tiles.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.25), ncol=3)
    return _png(fig)
