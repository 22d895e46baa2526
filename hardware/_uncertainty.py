"""How far to trust a prediction: the calibration's leave-one-out spread and its range.

The model's five parameters were fitted on four published rows (``calibration.json``), so
those rows' own errors say little; each row predicted by a fit without it (leave-one-out)
says how far a new configuration of the same kind may be off. The band of a prediction is
that spread: ``x (1 +/- sigma)`` with ``sigma`` the root-mean-square of the leave-one-out
relative errors (one standard deviation of the error, were the errors normal; four rows
give a coarse estimate, so read it as "a few per cent", not as a confidence level).

The rows are those of the fit the step leans on (:func:`calibration_for`), chosen by what the
program's structure shows (``hardware._terms.leaned_on``: matmul-dominated FLOPs, offloaded
parameter tensors), or by the family a user named (``--calibration-family``), never by the
model's name. A configuration the calibration rows do not cover is an extrapolation, named
as such: more IPUs than the largest row (the cross-Pod collectives follow the fitted GW-Link
latency far beyond the Pods that fixed it), another IPU than the rows', or a step whose
compute is far
more the fixed cost of its operations than the rows' was (``fixed_cost_share``): the rows
all ran one micro-batch size, so they cannot tell that cost from the efficiency, and a
step of many small operations (a deep net at a small micro-batch) leans on the split.

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

from hardware._compute import compute_set_overhead
from hardware._layout import ReplicaLayout
from hardware._parameters import SHARED_FAMILY, calibration_file
from hardware._specs import SystemSpec, get_system
from hardware._step_simulation import StepSimulation
from hardware._terms import leaned_on

METHOD = "leave-one-out RMS relative error of the calibration rows"
# The band from cross-validation (``benchmarks/validate.py --write``), where the file has one.
CV_METHOD = "80 % band of the cross-validated errors of {rows} published rows, {kind}"
CV_KINDS = {"family_unseen": "family unseen", "family_seen": "family seen"}
# After ``--calibrate-from``: the band of the user's own measured runs, each predicted by a
# refit without it (``popdist_emu.calibration.UserFit``), once there are enough of them.
MEASURED_METHOD = "80 % band of the cross-validated errors of your {rows} measured runs"
REFIT_CLAUSE = " (--calibrate-from refit)"
# How far (in points of the compute) a step's fixed-cost share may exceed the rows' before
# it is called an extrapolation: the rows' own shares differ by a few points.
FIXED_COST_MARGIN = 0.1


def step_band(factors: tuple[float, float], seconds: float) -> tuple[float, float]:
    """The step time matching a throughput band's ``(low, high)`` ``factors``: ``(fast,
    slow)`` (a low factor of 0 or below: no slowest step)."""
    low, high = factors
    return seconds / high, seconds / low if low > 0 else math.inf


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
        fixed_cost_share: the largest ``fixed_cost_share`` of the rows' steps (0: not
            recorded, and not checked).
        family: the family fit whose rows these are; empty: the shared fit's.
        cv_band: ``(low, high)`` factors of the 80 % band of the cross-validated residuals of
            published rows like the run (``benchmarks/validate.py --write``); empty: none
            stored, and the band is the rows' leave-one-out RMS.
        cv_rows: the residuals ``cv_band`` was taken from.
        cv_kind: which rows: ``family_unseen`` (every row, each predicted by a fit without
            any row of its family: a program the calibration never ran), ``family_seen``
            (rows whose family a fit used, each predicted by a fit without it) or
            ``measured_runs`` (the user's own runs after ``--calibrate-from``, each
            predicted by a refit without it).
        refitted_from: the file of measured runs the parameters were refitted to
            (``--calibrate-from``); empty: none.
    """

    rows: tuple[CalibrationRow, ...]
    data: str
    model_families: tuple[str, ...]
    fixed_cost_share: float = 0.0
    family: str = ""
    cv_band: tuple[float, ...] = ()
    cv_rows: int = 0
    cv_kind: str = ""
    refitted_from: str = ""

    @property
    def parameter_set(self) -> str:
        """The fit whose rows give the band, in words: a family's fit, the shared fit and the
        models it was fitted on, or the priors (no file)."""
        refit = (
            f", refitted to {pathlib.Path(self.refitted_from).name}" if self.refitted_from else ""
        )
        if self.family:
            return f"{self.family} fit ({', '.join(self.model_families)}){refit}"
        if self.model_families:
            return f"shared fit ({', '.join(self.model_families)}){refit}"
        return "uncalibrated priors"

    @property
    def method(self) -> str:
        """How the band is derived, in words."""
        refit = REFIT_CLAUSE if self.refitted_from else ""
        if self.cv_kind == "measured_runs":
            return MEASURED_METHOD.format(rows=self.cv_rows) + refit
        if self.cv_band:
            kind = CV_KINDS.get(self.cv_kind, "")
            return CV_METHOD.format(rows=self.cv_rows, kind=kind) + refit
        return METHOD + refit

    @property
    def relative_spread(self) -> float:
        """``sigma``: the RMS of the rows' leave-one-out relative errors (0 without rows); with
        a cross-validated band, its half-width."""
        if self.cv_band:
            return (self.cv_band[1] - self.cv_band[0]) / 2
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

    def factors(self) -> tuple[float, float]:
        """``(low, high)`` factors of a predicted throughput: the cross-validated band's, or
        ``1 -/+ sigma``."""
        if self.cv_band:
            return self.cv_band[0], self.cv_band[1]
        sigma = self.relative_spread
        return 1 - sigma, 1 + sigma

    def band(self, value: float) -> tuple[float, float]:
        """``value`` times :meth:`factors`: the spread of a predicted throughput."""
        low, high = self.factors()
        return value * low, value * high

    def step_band(self, seconds: float) -> tuple[float, float]:
        """The step time matching :meth:`band` of its throughput."""
        return step_band(self.factors(), seconds)

    def row_for(self, replicas: int, published: float) -> CalibrationRow | None:
        """The calibration row with this replica count and published figure, if any."""
        for row in self.rows:
            if row.replicas == replicas and math.isclose(row.published, published, rel_tol=1e-6):
                return row
        return None

    def extrapolations(
        self, layout: ReplicaLayout, system: SystemSpec, fixed_share: float = 0.0
    ) -> list[str]:
        """What of this configuration the calibration rows do not cover, one line each;
        ``fixed_share`` is the step's ``fixed_cost_share``."""
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
        if self.fixed_cost_share and fixed_share > self.fixed_cost_share + FIXED_COST_MARGIN:
            out.append(
                f"fixed cost per operation {fixed_share:.0%} of the compute, beyond the "
                f"calibration rows' {self.fixed_cost_share:.0%}: the rows cannot tell it from "
                "the compute efficiency, so a step of many small operations (a small "
                "micro-batch) is an extrapolation"
            )
        return out


def fixed_cost_share(sim: StepSimulation) -> float:
    """The part of a micro-batch's IPU compute that is the fixed cost of its operations
    (``compute_set_seconds`` per compute set) rather than their arithmetic and memory time,
    over all the replica's stages (a data-parallel replica's one stage is its micro-step)."""
    ipu, params = sim.system.ipu, sim.parameters
    stages = sim.replica.schedule.stages
    fixed = sum(compute_set_overhead(s.stage.num_ops, ipu, params) for s in stages)
    total = sum(s.forward_seconds + s.backward_seconds for s in stages)
    return min(fixed / total, 1.0) if total > 0 else 0.0


@functools.lru_cache(maxsize=8)
def load_calibration(path: str | pathlib.Path | None = None, family: str = "") -> Calibration:
    """The calibration rows of ``path`` (default: the packaged calibration.json) of one fit:
    ``family``'s (a key of the file's ``families``), or the shared fit's (empty or
    ``SHARED_FAMILY``); none when the file does not exist (a checkout before anyone
    calibrated). Read once per process and fit: every report and every point of a sweep
    asks for it."""
    file = calibration_file(path)
    if not file.exists():
        return Calibration((), "", ())
    data = json.loads(file.read_text())
    own = family if family and family != SHARED_FAMILY else ""
    record = data.get("families", {}).get(own, {}) if own else data
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
    names = tuple(record.get("model_families", (own,) if own else ()))
    share = float(record.get("fixed_cost_share", 0.0))
    refit = data.get("calibrate_from", {})
    # A named family (--calibration-family) is the user saying the program is of that family,
    # which a fit saw; otherwise a program is of a family no published row need share. A
    # refit to measured runs of the program (--calibrate-from) stores the band it earned.
    kind = "family_seen" if own else "family_unseen"
    cv = data.get("cross_validation", {}).get("bands", {}).get(kind)
    if refit.get("band"):
        cv = refit["band"]
        kind = str(cv.get("kind", "family_seen"))
    source = str(refit.get("file", ""))
    if not cv:
        return Calibration(
            rows, str(record.get("data", "")), names, share, own, refitted_from=source
        )
    band = (float(cv["low"]), float(cv["high"]))
    return Calibration(
        rows, str(record.get("data", "")), names, share, own, band, int(cv["rows"]), kind, source
    )


def calibration_for(sim: StepSimulation, path: str | pathlib.Path | None = None) -> Calibration:
    """The calibration whose rows give ``sim``'s band: the family a user named
    (``ModelParameters.family_override``); else the first family fit that set a parameter
    the step leans on (``hardware._terms.leaned_on``: its matmul efficiency for a
    matmul-dominated step, its per-transfer streaming cost for an offloaded one); else the
    shared fit. Decided by the program's structure, never by its name. The file is
    ``path``, else the one the step's parameters were read from (a ``--calibrate-from``
    refit's), else the packaged one."""
    path = path if path is not None else (sim.parameters.source_file or None)
    override = sim.parameters.family_override
    if override:
        return load_calibration(path, override)
    file = calibration_file(path)
    families = json.loads(file.read_text()).get("families", {}) if file.exists() else {}
    leans = set(leaned_on(sim))
    for name, record in families.items():
        if leans & set(record.get("parameters", {})):
            return load_calibration(path, name)
    return load_calibration(path)
