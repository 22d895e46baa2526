"""How far to trust a prediction: the calibration's leave-one-out spread and its range.

The model's five parameters were fitted on four published rows (``calibration.json``), so
those rows' own errors say little; each row predicted by a fit without it (leave-one-out)
says how far a new configuration of the same kind may be off. The band of a prediction is
that spread: ``x (1 +/- sigma)`` with ``sigma`` the root-mean-square of the leave-one-out
relative errors (one standard deviation of the error, were the errors normal; four rows
give a coarse estimate, so read it as "a few per cent", not as a confidence level).

A configuration the calibration rows do not cover is an extrapolation, named as such:
more IPUs than the largest row (the cross-Pod collectives follow the fitted GW-Link
latency far beyond the Pods that fixed it), another IPU than the rows', or another model
family than the one the compute efficiency was fitted on.

References:
    Hastie, Tibshirani and Friedman, "The Elements of Statistical Learning", 2nd ed.,
    section 7.10 (cross-validation, leave-one-out). MLPerf Training v1.1 result logs
    (mlcommons/training_results_v1.1, Graphcore): the calibration rows.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib

from hardware._layout import ReplicaLayout
from hardware._parameters import CALIBRATION_FILE, calibration_family
from hardware._specs import SystemSpec, get_system

METHOD = "leave-one-out RMS relative error of the calibration rows"


@dataclasses.dataclass(frozen=True)
class CalibrationRow:
    """One published row the parameters were fitted on, with its errors.

    Attributes:
        system: the ``--system`` of the row.
        replicas: its replica count.
        published: its published samples per second.
        error: the fitted model's relative error on it.
        leave_one_out_error: the relative error of a fit made without it.
    """

    system: str
    replicas: int
    published: float
    error: float
    leave_one_out_error: float


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What the parameters were fitted on, and the spread of a new prediction.

    Attributes:
        rows: the calibration rows.
        data: where the rows come from.
        model_families: the models the rows measured (the compute efficiency's).
    """

    rows: tuple[CalibrationRow, ...]
    data: str
    model_families: tuple[str, ...]

    @property
    def method(self) -> str:
        """How the band is derived, in words."""
        return METHOD

    @property
    def relative_spread(self) -> float:
        """``sigma``: the RMS of the rows' leave-one-out relative errors (0 without rows)."""
        errors = [r.leave_one_out_error for r in self.rows]
        return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0

    @property
    def max_ipus(self) -> int:
        """IPUs of the largest calibration row (each row ran on all of its system's IPUs)."""
        return max((get_system(r.system).num_ipus for r in self.rows), default=0)

    @property
    def ipu_names(self) -> tuple[str, ...]:
        """The IPUs the rows ran on."""
        return tuple(sorted({get_system(r.system).ipu.name for r in self.rows}))

    def band(self, value: float) -> tuple[float, float]:
        """``value (1 -/+ sigma)``: the spread of a predicted throughput."""
        sigma = self.relative_spread
        return value * (1 - sigma), value * (1 + sigma)

    def step_band(self, seconds: float) -> tuple[float, float]:
        """The step time matching :meth:`band` of its throughput."""
        sigma = self.relative_spread
        return seconds / (1 + sigma), seconds / (1 - sigma) if sigma < 1 else math.inf

    def row_for(self, replicas: int, published: float) -> CalibrationRow | None:
        """The calibration row with this replica count and published figure, if any."""
        for row in self.rows:
            if row.replicas == replicas and math.isclose(row.published, published, rel_tol=1e-6):
                return row
        return None

    def extrapolations(self, layout: ReplicaLayout, system: SystemSpec, model: str) -> list[str]:
        """What of this configuration the calibration rows do not cover, one line each."""
        out = []
        ipus = layout.num_ipus
        if self.rows and ipus > self.max_ipus:
            out.append(
                f"{ipus:,} IPUs: beyond the largest calibration row ({self.max_ipus:,} IPUs); "
                "collectives across more Pods follow the fitted GW-Link latency far beyond "
                "the Pods that fixed it"
            )
        if self.rows and system.ipu.name not in self.ipu_names:
            out.append(
                f"{system.ipu.name}: the calibration rows ran on {', '.join(self.ipu_names)}; "
                "the fitted parameters carry over scaled by clock and datasheet figures"
            )
        family = model.lower().replace("_", "-")
        if self.model_families and not any(f.lower() in family for f in self.model_families):
            out.append(
                f"model {model}: the compute efficiency was fitted on "
                f"{', '.join(self.model_families)}; another model's compute time is an "
                "extrapolation"
            )
        return out


@functools.lru_cache(maxsize=8)
def load_calibration(path: str | pathlib.Path | None = None, model: str = "") -> Calibration:
    """The calibration rows of ``path`` (default: the packaged calibration.json) that fitted
    the parameters ``model`` runs with: its family's rows when it belongs to a calibrated
    family (``calibration_family``), else the shared rows; none when the file does not exist
    (a checkout before anyone calibrated). Read once per process and model: every report and
    every point of a sweep asks for it."""
    file = pathlib.Path(path) if path is not None else CALIBRATION_FILE
    if not file.exists():
        return Calibration((), "", ())
    data = json.loads(file.read_text())
    families = data.get("families", {})
    family = calibration_family(model, families)
    record = families[family] if family else data
    rows = tuple(
        CalibrationRow(
            system=str(r["system"]),
            replicas=int(r["replicas"]),
            published=float(r["published_samples_per_second"]),
            error=float(r["error"]),
            leave_one_out_error=float(r["leave_one_out_error"]),
        )
        for r in record.get("rows", ())
    )
    names = (family,) if family else tuple(data.get("model_families", ()))
    return Calibration(rows, str(record.get("data", "")), names)
