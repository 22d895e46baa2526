"""How far a single run's prediction can be trusted: its band and what it extrapolates.

Every predicted throughput and step time is shown with the calibration's leave-one-out
spread (``hardware._uncertainty``), and a configuration the calibration rows do not cover
says what it extrapolates, in ``summary.json``, the printed summary and the page alike.
"""

from __future__ import annotations

import html
from typing import TypedDict

from hardware import StepSimulation, fixed_cost_share, load_calibration


class UncertaintySummary(TypedDict):
    """``summary.json``'s ``uncertainty`` object."""

    method: str
    calibration: str  # where the calibration rows come from
    parameters: str  # the calibrated parameter set every figure comes from
    relative: float
    samples_per_second: list[float]  # [low, high]
    simulated_step_seconds: list[float]  # [fast, slow]
    extrapolations: list[str]


def uncertainty_summary(sim: StepSimulation) -> UncertaintySummary:
    """``summary.json``'s ``uncertainty``: the bands, how they were derived, and the
    extrapolations (empty when the configuration is inside the calibrated range)."""
    calibration = load_calibration(model=sim.profile.name)
    low, high = calibration.band(sim.samples_per_second)
    fast, slow = calibration.step_band(sim.simulated_step_seconds)
    return {
        "method": calibration.method,
        "calibration": calibration.data,
        "parameters": calibration.parameter_set,
        "relative": calibration.relative_spread,
        "samples_per_second": [low, high],
        "simulated_step_seconds": [fast, slow],
        "extrapolations": calibration.extrapolations(
            sim.layout, sim.system, sim.profile.name, fixed_cost_share(sim)
        ),
    }


def uncertainty_lines(sim: StepSimulation) -> list[str]:
    """The printed summary's lines: the band, then one line per extrapolation."""
    u = uncertainty_summary(sim)
    low, high = u["samples_per_second"]
    lines = [
        f"  uncertainty: +/-{100 * u['relative']:.1f} % ({u['method']}): "
        f"{low:,.0f} to {high:,.0f} samples/s; calibrated parameters: {u['parameters']}"
    ]
    lines += [f"  EXTRAPOLATED: {line}" for line in u["extrapolations"]]
    return lines


def uncertainty_html(sim: StepSimulation) -> str:
    """The page's paragraph on the band and the extrapolations."""
    u = uncertainty_summary(sim)
    low, high = u["samples_per_second"]
    fast, slow = u["simulated_step_seconds"]
    text = (
        f"<p>Uncertainty: &plusmn;{100 * u['relative']:.1f} %, the {html.escape(u['method'])} "
        f"({html.escape(u['calibration'])}; calibrated parameters: "
        f"{html.escape(u['parameters'])}): {low:,.0f} to {high:,.0f} samples/s, a step of "
        f"{fast * 1e3:.3f} to {slow * 1e3:.3f} ms.</p>"
    )
    if u["extrapolations"]:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in u["extrapolations"])
        text += (
            '<p class="bad">Outside the calibrated range, so the band understates the '
            f"error:</p><ul>{items}</ul>"
        )
    return text
