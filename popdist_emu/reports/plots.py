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
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

MIB = 2**20
# Phases shorter than this are rounding noise of the timeline (e.g. 1e-19 s of host IO).
SHOWN_SECONDS = 1e-9
_DPI = 80


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    FigureCanvasAgg(fig)
    fig.savefig(buffer, format="png", dpi=_DPI, bbox_inches="tight")
    return buffer.getvalue()


def _log2_axis(ax, replicas: Sequence[int]) -> None:
    ticks = sorted(set(int(n) for n in replicas))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{n:,}" for n in ticks], rotation=45 if len(ticks) > 6 else 0)
    ax.minorticks_off()


def throughput_plot(series: Sequence[Mapping[str, Any]], published: Sequence[Mapping]) -> bytes:
    """Throughput against replicas (log-log), with the ideal line, the fit and measurements.

    Args:
        series: per series ``label``, ``replicas``, ``throughput`` (valid points only),
            and optionally ``fit_replicas``/``fit_throughput`` (the fitted law).
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


def efficiency_plot(series: Sequence[Mapping[str, Any]], thresholds: Sequence[float]) -> bytes:
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
    ax, labels: Sequence[str], stacks: Sequence[Mapping[str, float]], scale: float, least: float
):
    names: list[str] = []
    for stack in stacks:
        names += [k for k, v in stack.items() if v > least and k not in names]
    bottom = [0.0] * len(stacks)
    for i, name in enumerate(names):
        values = [stack.get(name, 0.0) * scale for stack in stacks]
        ax.bar(labels, values, bottom=bottom, label=name, color=f"C{i % 10}")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    return bottom


def phases_plot(series: Sequence[Mapping[str, Any]]) -> bytes:
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


def memory_plot(series: Sequence[Mapping[str, Any]]) -> bytes:
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
    colors = [f"C{i % 10}" for i in range(len(items))] + ["black"]
    ax.barh(names, values, color=colors)
    ax.invert_yaxis()
    ax.set_xlabel("ms per step")
    ax.set_title("Phases of one step (busy time; collectives and host IO as exposed)")
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def single_memory_plot(categories: Mapping[str, float], capacity: float) -> bytes:
    """One run's memory per IPU: one stacked bar by category against the capacity."""
    fig = Figure(figsize=(7, 2.6), layout="constrained")
    ax = fig.subplots()
    left = 0.0
    for i, (name, value) in enumerate((k, v) for k, v in categories.items() if v > 0):
        ax.barh(["per IPU"], [value / MIB], left=[left], color=f"C{i % 10}", label=name)
        left += value / MIB
    ax.axvline(capacity / MIB, color="black", linewidth=2, label="capacity")
    ax.set_xlabel("MiB")
    ax.set_title("Memory per IPU by category")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)
