"""How far a single run's prediction can be trusted: its band, what it extrapolates, and
which fitted terms produced it.

Every predicted throughput and step time is shown with the leave-one-out spread of the fit
the step leans on (``hardware.calibration_for``: chosen by the program's structure, or by
``--calibration-family``), a configuration the calibration rows do not cover says what it
extrapolates, and the parameter set and each phase's terms (``hardware.phase_terms``) are
named, in ``summary.json``, the printed summary and the page alike. Where the host decides the
throughput, or nearly does, the band also carries the measured spread of the host's CPU per
sample, at the band's coverage and added in quadrature (``hardware.host_share``,
``hardware.host_half_width``), and says the host's share.
"""

from __future__ import annotations

import html
from typing import TypedDict

from hardware import (
    FITTED_PARAMETERS,
    StepSimulation,
    band_factors,
    band_step_seconds,
    calibration_for,
    fixed_cost_share,
    host_half_width,
    host_share,
    matmul_share,
    multi_ipu_sync_calls,
    phase_terms,
)


class UncertaintySummary(TypedDict):
    """``summary.json``'s ``uncertainty`` object."""

    method: str
    calibration: str  # where the calibration rows come from
    parameters: str  # the parameter set every figure comes from (structural or an override)
    band_fit: str  # the fit whose rows give the band
    band_family: str  # its name for --calibration-family ("" for the shared fit)
    terms: dict[str, str]  # phase -> the fitted terms that produced it
    matmul_share: float  # the share of the step's FLOPs in matmuls
    multi_ipu_sync_calls: int  # host calls per step of a multi-IPU replica (0 or 1)
    relative: float  # the band's half-width: the model's and the host's in quadrature
    model_relative: float  # the model's part alone (the calibration's band)
    host_relative: float  # the host's part: its measured spread, 0 when the host is far off
    host_in_band: float  # host_relative at the band's coverage, as it joins the band
    host_spread_measured: float  # the measured spread of the host's CPU per sample
    samples_per_second: list[float]  # [low, high]
    simulated_step_seconds: list[float]  # [fast, slow]
    extrapolations: list[str]


def uncertainty_summary(sim: StepSimulation) -> UncertaintySummary:
    """``summary.json``'s ``uncertainty``: the bands, how they were derived, and the
    extrapolations (empty when the configuration is inside the calibrated range)."""
    calibration = calibration_for(sim)
    model = calibration.relative_spread
    host = host_share(sim, model, host_half_width(calibration, 1.0))
    factors = band_factors(calibration, host)
    low, high = (sim.samples_per_second * f for f in factors)
    fast, slow = band_step_seconds(factors, sim.simulated_step_seconds)
    return {
        "method": calibration.method,
        "calibration": calibration.data,
        "parameters": sim.parameters.parameter_set,
        "band_fit": calibration.parameter_set,
        "band_family": calibration.family,
        "terms": phase_terms(sim),
        "matmul_share": matmul_share(sim),
        "multi_ipu_sync_calls": multi_ipu_sync_calls(sim.layout),
        "relative": (factors[1] - factors[0]) / 2,
        "model_relative": model,
        "host_relative": host,
        "host_in_band": host_half_width(calibration, host),
        "host_spread_measured": sim.profile.host_cpu_relative_spread,
        "samples_per_second": [low, high],
        "simulated_step_seconds": [fast, slow],
        "extrapolations": calibration.extrapolations(sim.layout, sim.system, fixed_cost_share(sim)),
    }


def _host_clause(u: UncertaintySummary, plus_minus: str) -> str:
    """What the band owes the host, for the printed line and the page alike: nothing when the
    host's spread is not in it."""
    if u["host_relative"] <= 0:
        return ""
    at_coverage = (
        f" ({plus_minus}{100 * u['host_in_band']:.1f} % at the band's coverage)"
        if u["host_in_band"] != u["host_relative"]
        else ""
    )
    return (
        f"; with the host's measured spread {plus_minus}{100 * u['host_relative']:.1f} %"
        f"{at_coverage} in quadrature with the model's {plus_minus}"
        f"{100 * u['model_relative']:.1f} %"
    )


def uncertainty_lines(sim: StepSimulation) -> list[str]:
    """The printed summary's lines: the band, the parameter set, one line per
    extrapolation, then the terms of each phase."""
    u = uncertainty_summary(sim)
    low, high = u["samples_per_second"]
    method = u["method"] + _host_clause(u, "+/-")
    lines = [
        f"  uncertainty: +/-{100 * u['relative']:.1f} % ({method}): "
        f"{low:,.0f} to {high:,.0f} samples/s; calibrated parameters: {u['band_fit']}; "
        f"parameter set: {u['parameters']}"
    ]
    lines += [f"  EXTRAPOLATED: {line}" for line in u["extrapolations"]]
    lines.append(f"  terms (matmul FLOPs {u['matmul_share']:.0%}): {_terms_line(u['terms'])}")
    return lines


def _terms_line(terms: dict[str, str]) -> str:
    """Each phase's fitted parameters by name (phases with the same ones together), for the
    printed summary; ``summary.json`` and the page give the values."""
    by_names: dict[tuple[str, ...], list[str]] = {}
    for phase, text in terms.items():
        names = tuple(n for n in FITTED_PARAMETERS if n in text) or ("no fitted term",)
        by_names.setdefault(names, []).append(phase)
    return "; ".join(f"{', '.join(ph)}: {', '.join(n)}" for n, ph in by_names.items())


def uncertainty_html(sim: StepSimulation) -> str:
    """The page's paragraph on the band and the extrapolations."""
    u = uncertainty_summary(sim)
    low, high = u["samples_per_second"]
    fast, slow = u["simulated_step_seconds"]
    text = (
        f"<p>Uncertainty: &plusmn;{100 * u['relative']:.1f} %, "
        f"the {html.escape(u['method'])}{_host_clause(u, '&plusmn;')} "
        f"({html.escape(u['calibration'])}, the {html.escape(u['band_fit'])}; parameter set: "
        f"{html.escape(u['parameters'])}): {low:,.0f} to {high:,.0f} samples/s, a step of "
        f"{fast * 1e3:.3f} to {slow * 1e3:.3f} ms.</p>"
    )
    items = "".join(
        f"<li>{html.escape(phase)}: {html.escape(line)}</li>" for phase, line in u["terms"].items()
    )
    text += f"<p>The fitted terms of each phase:</p><ul>{items}</ul>"
    if u["extrapolations"]:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in u["extrapolations"])
        text += (
            '<p class="bad">Outside the calibrated range, so the band understates the '
            f"error:</p><ul>{items}</ul>"
        )
    return text
