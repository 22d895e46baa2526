"""The rows and the analysis of a scaling sweep, from each series' evaluated points.

One row per point (valid or not), in the units a person reads: seconds, samples per second,
bytes. The analysis of a series (speed-up over its smallest valid point, efficiency,
Karp-Flatt, the fitted law, where efficiency falls below 80 % and 50 %, the phase whose share
grows fastest) uses only the points that were simulated and fit in memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from contract import COLLECTIVE_PHASES, TIER_PHASES
from popdist_emu.scaling import _analysis as analysis
from popdist_emu.scaling._config import EvaluatedPoint


def plotted_phases(result: Mapping[str, Any]) -> dict[str, float]:
    """A point's phases with the collectives split by link tier instead of by kind.

    Every other phase the simulation reports passes through unchanged (so a new phase, such
    as a pipeline bubble, shows up without a change here).
    """
    phases = {
        name: float(seconds)
        for name, seconds in result["summary"]["phases"].items()
        if name not in COLLECTIVE_PHASES
    }
    for tier, seconds in result.get("link_tiers", {}).items():
        phases[TIER_PHASES.get(tier, tier)] = float(seconds)
    return phases


def _finite(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def series_rows(label: str, points: Sequence[EvaluatedPoint]) -> list[dict[str, Any]]:
    """One row per point of the series ``label``, speed-ups included.

    A row's keys that ``summary.json`` also has carry the summary's value under its name
    (``memory_per_ipu`` is the dict of categories, ``memory_per_ipu_total`` their sum); the
    others are the layout and what is derived from the series (speed-up, efficiency,
    Karp-Flatt).
    """
    rows = []
    for evaluated in points:
        point = evaluated.point
        result = evaluated.result or {"status": "invalid", "reason": "not evaluated"}
        s = result.get("summary")
        row: dict[str, Any] = {
            "series": label,
            "status": result["status"],
            "reason": result.get("reason", ""),
            "system": s["system"] if s else point.system,
            "replicas": point.replicas,
            "instances": point.instances,
            "ipus_per_replica": point.ipus_per_replica,
            "ipus": point.num_ipus,
            "micro_batch_size": s["micro_batch_size"] if s else None,
            "gradient_accumulation": s["gradient_accumulation"] if s else None,
            "device_iterations": s["device_iterations"] if s else None,
            "global_batch": (
                s["replicas"] * s["micro_batch_size"] * s["gradient_accumulation"]
                if s
                else point.global_batch
            ),
            "simulated_step_seconds": s["simulated_step_seconds"] if s else None,
            "samples_per_second": s["samples_per_second"] if s else None,
            # The calibration's leave-one-out band, and what the point extrapolates.
            "samples_per_second_low": s["uncertainty"]["samples_per_second"][0] if s else None,
            "samples_per_second_high": s["uncertainty"]["samples_per_second"][1] if s else None,
            "extrapolations": list(s["uncertainty"]["extrapolations"]) if s else [],
            # The fit whose rows give the band ("" for the shared fit's), chosen by the
            # program's structure or --calibration-family, never by the model's name.
            "band_family": s["uncertainty"].get("band_family", "") if s else "",
            "speedup": None,
            "efficiency": None,
            "karp_flatt": None,
            "phases": dict(s["phases"]) if s else {},
            "link_tiers": dict(result.get("link_tiers", {})),
            "memory_per_ipu": dict(s["memory_per_ipu"]) if s else {},
            "memory_per_ipu_total": s["memory_per_ipu_total"] if s else None,
            "memory_capacity_per_ipu": s["memory_capacity_per_ipu"] if s else None,
            "fits_in_memory": s["fits_in_memory"] if s else None,
            "evaluation_seconds": result.get("evaluation_seconds"),
            # The point's summary.json, as a single run writes it (model parameters aside:
            # they are the sweep's, once, in scaling.json).
            "summary": {k: v for k, v in (s or {}).items() if k != "model_parameters"},
        }
        rows.append(row)
    good = [r for r in rows if r["status"] == "ok"]
    if good:
        n = [r["replicas"] for r in good]
        p = analysis.relative_size(n)
        speed = analysis.speedups(n, [r["samples_per_second"] for r in good])
        eff = analysis.efficiency(p, speed)
        kf = analysis.karp_flatt(p, speed)
        for r, sp, e, k in zip(good, speed, eff, kf, strict=True):
            r.update(speedup=_finite(sp), efficiency=_finite(e), karp_flatt=_finite(k))
    return rows


def analyse_series(rows: Sequence[Mapping[str, Any]], law: str) -> dict[str, Any]:
    """The fits and the limits of one series' rows (see the module docstring)."""
    good = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["replicas"])
    result: dict[str, Any] = {
        "law": law,
        "valid_points": len(good),
        "baseline_replicas": good[0]["replicas"] if good else None,
        "fit": None,
        "efficiency_below": {},
        "phase_share_slopes": {},
        "fastest_growing_phase": None,
    }
    if not good:
        return result
    n = [r["replicas"] for r in good]
    p = analysis.relative_size(n)
    speed = [r["speedup"] for r in good]
    fit = analysis.fit_law(law, p, speed)
    eff = [r["efficiency"] for r in good]
    for t in analysis.EFFICIENCY_THRESHOLDS:
        fitted = fit.efficiency_crossing(t) * n[0] if fit else math.inf
        result["efficiency_below"][f"{round(100 * t)} %"] = {
            "first_simulated_replicas": analysis.first_below(n, eff, t),
            "fitted_replicas": _finite(fitted),
        }
    if fit is not None:
        poor = analysis.poor_fit(fit, speed)
        result["fit"] = {
            "law": fit.law,
            "serial_fraction": fit.serial_fraction,
            "stderr": _finite(fit.stderr),
            "rms_residual": fit.rms_residual,
            "points": fit.points,
            "relative_rms_residual": analysis.relative_rms_residual(fit, speed),
            "poor": poor,
        }
        if poor:  # its crossings describe the law, not these points: none is stated
            for below in result["efficiency_below"].values():
                below["fitted_replicas"] = None
    phases = [
        plotted_phases({"summary": {"phases": r["phases"]}, "link_tiers": r["link_tiers"]})
        for r in good
    ]
    slopes = analysis.phase_share_slopes(n, phases, [r["simulated_step_seconds"] for r in good])
    result["phase_share_slopes"] = slopes
    result["fastest_growing_phase"] = analysis.fastest_growing_phase(slopes)
    if result["fastest_growing_phase"]:
        name = result["fastest_growing_phase"]
        result["fastest_growing_share"] = {
            "first": phases[0].get(name, 0.0) / good[0]["simulated_step_seconds"],
            "last": phases[-1].get(name, 0.0) / good[-1]["simulated_step_seconds"],
        }
    return result


CSV_FIELDS = (
    "series",
    "status",
    "reason",
    "system",
    "replicas",
    "instances",
    "ipus_per_replica",
    "ipus",
    "micro_batch_size",
    "gradient_accumulation",
    "device_iterations",
    "global_batch",
    "simulated_step_seconds",
    "samples_per_second",
    "samples_per_second_low",
    "samples_per_second_high",
    "speedup",
    "efficiency",
    "karp_flatt",
    "memory_per_ipu_total",
    "memory_capacity_per_ipu",
    "fits_in_memory",
    "evaluation_seconds",
)


def csv_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The CSV header: the fixed fields, then one column per phase and per link tier."""
    phases: list[str] = []
    tiers: list[str] = []
    for r in rows:
        phases += [k for k in r["phases"] if k not in phases]
        tiers += [k for k in r["link_tiers"] if k not in tiers]
    return [
        *CSV_FIELDS,
        "extrapolated",
        *(f"phase_{k}_seconds" for k in phases),
        *(f"{k}_seconds" for k in tiers),
    ]


def csv_record(row: Mapping[str, Any]) -> dict[str, object]:
    """A row flattened for ``csv.DictWriter`` (phases and tiers as their own columns)."""
    record = {k: row[k] for k in CSV_FIELDS}
    record["extrapolated"] = "; ".join(row["extrapolations"])
    record.update({f"phase_{k}_seconds": v for k, v in row["phases"].items()})
    record.update({f"{k}_seconds": v for k, v in row["link_tiers"].items()})
    return {k: ("" if v is None else v) for k, v in record.items()}
