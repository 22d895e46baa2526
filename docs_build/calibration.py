"""The shipped fits' parameters and rows, rendered from ``hardware/calibration.json``.

The hardware model's figures come from the fits stored in ``hardware/calibration.json``
(``benchmarks/calibrate.py --write`` writes the shared fit, ``benchmarks/calibrate_bert.py
--write`` a family's), so the pages that explain a fit show that file, not a copy of it: a
refit changes the page with the file. ``<!-- generated: calibration shared -->`` is the
shared fit; ``<!-- generated: calibration FAMILY -->`` a family's (``BERT``).
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = ROOT / "hardware" / "calibration.json"
SHARED = "shared"

# A row's columns as the page heads them; a column the file does not hold is left out.
COLUMNS = {
    "row": "row",
    "system": "system",
    "replicas": "replicas",
    "gradient_accumulation": "GA",
    "published_samples_per_second": "published samples/s",
    "predicted_samples_per_second": "predicted samples/s",
    "error": "error",
    "leave_one_out_predicted": "leave-one-out predicted",
    "leave_one_out_error": "leave-one-out error",
}


class UnknownFitError(LookupError):
    """A page asked for a fit the calibration file does not hold."""


def _seconds(value: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} s"


def _parameter(name: str, value: float) -> str:
    """Seconds in the unit that reads best; fractions (the efficiencies) as they are."""
    return _seconds(value) if name.endswith(("_latency", "_seconds")) else f"{value:.3g}"


def _cell(key: str, value: object) -> str:
    """Errors as signed percentages, throughputs to the sample, the rest as stored."""
    if not isinstance(value, float | int) or isinstance(value, bool):
        return str(value)
    if key.endswith("error"):
        return f"{value * 100:+.1f} %"
    if key.endswith("samples_per_second") or key.endswith("_predicted"):
        return f"{value:,.0f}"
    return str(value)


def fit_record(name: str, path: Path = CALIBRATION) -> dict:
    """The shared fit (``name`` ``shared``) or a family's, as the file stores it.

    Raises:
        UnknownFitError: a family the file does not hold.
    """
    record = json.loads(path.read_text())
    if name == SHARED:
        return record
    families = record.get("families", {})
    if name not in families:
        known = ", ".join([SHARED, *families])
        raise UnknownFitError(f"calibration {name!r} is not in {path.name}: use one of {known}")
    return families[name]


def render(name: str, path: Path = CALIBRATION) -> str:
    """The fit's provenance line, its parameters and its rows as Markdown tables."""
    fit = fit_record(name, path)
    header = f"Fitted by `{fit['fitted_by']}` on {fit['data']}; from `hardware/{path.name}`."
    parameters = ["| parameter | fitted value |", "|---|---|"]
    parameters += [f"| `{k}` | {_parameter(k, v)} |" for k, v in fit["parameters"].items()]
    columns = [key for key in COLUMNS if any(key in row for row in fit["rows"])]
    rows = ["| " + " | ".join(COLUMNS[c] for c in columns) + " |", "|" + "---|" * len(columns)]
    for row in fit["rows"]:
        rows.append("| " + " | ".join(_cell(c, row.get(c, "")) for c in columns) + " |")
    return "\n".join([header, "", *parameters, "", *rows, ""])
