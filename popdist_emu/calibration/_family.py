"""A family's fit: its own compute efficiency and host synchronisation, in closed form.

A model family whose rows all deviate the same way from the shared fit (BERT's: a large
matmul keeps the IPU busier than ResNet-50's convolutions, and each weight update pays a
host round trip) gets two parameters of its own; every other parameter stays shared. A row's
simulated step is exactly ``a / compute_efficiency + b + host_sync_seconds`` seconds for its
samples: a stage's arithmetic time is proportional to ``1 / compute_efficiency``, and its
compute-set and memory time, the collectives and the update depend on neither. So two runs of
a row at two trial efficiencies give its ``a`` and ``b`` (:func:`solve_step_terms`), and the
two parameters then minimise the squared relative throughput error of the closed form
(:func:`calibrate_family`); each row is predicted again by a fit without it (leave-one-out).

References:
    Branch, Coleman and Li, SIAM J. Sci. Comput. 21(1), 1999 (scipy.optimize.least_squares'
    "trf" method); Hastie, Tibshirani and Friedman, "The Elements of Statistical Learning",
    2nd ed., section 7.10 (leave-one-out).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy.optimize import least_squares

FAMILY_PARAMETERS = ("compute_efficiency", "host_sync_seconds")
TRIAL_SCALE = 1.25  # the second trial efficiency, relative to the shared one
HOST_SYNC_START = 0.05  # seconds: where the fit starts (the shared value is ~1000x smaller)
# Bounds of (compute_efficiency, host_sync_seconds).
LOWER_BOUNDS = (1e-3, 1e-6)
UPPER_BOUNDS = (1.0, 10.0)


class StepTerms(NamedTuple):
    """A row's simulated step in closed form: ``a / compute_efficiency + b +
    host_sync_seconds`` seconds for ``samples_per_step`` samples."""

    a: float  # seconds at compute efficiency 1: the step's arithmetic
    b: float  # seconds that depend on neither parameter
    samples_per_step: float


class FamilyRow(NamedTuple):
    """One published row of a family's fit: what names it and its measured terms."""

    row: str  # its key in benchmarks/published_rows.md
    system: str
    replicas: int
    gradient_accumulation: int
    published: float  # samples per second
    terms: StepTerms

    @classmethod
    def from_record(cls, record: dict) -> FamilyRow:
        """The row as ``calibration.json``'s family record stores it."""
        return cls(
            record["row"],
            record["system"],
            record["replicas"],
            record["gradient_accumulation"],
            record["published_samples_per_second"],
            StepTerms(**record["closed_form_terms"]),
        )


def trial_efficiencies(shared_efficiency: float) -> tuple[float, float]:
    """The two compute efficiencies a row runs at to give its terms: the shared one and
    ``TRIAL_SCALE`` times it (at most 1)."""
    return shared_efficiency, min(shared_efficiency * TRIAL_SCALE, 1.0)


def solve_step_terms(
    steps: tuple[float, float], efficiencies: tuple[float, float], host_sync: float, samples: float
) -> StepTerms:
    """A row's terms from its step seconds at the two trial ``efficiencies``, both run with
    ``host_sync`` seconds of host synchronisation."""
    (t1, t2), (eta1, eta2) = steps, efficiencies
    a = (t1 - t2) / (1 / eta1 - 1 / eta2)
    return StepTerms(a, t1 - a / eta1 - host_sync, samples)


def predict_family(
    terms: Sequence[StepTerms], compute_efficiency: float, host_sync_seconds: float
) -> np.ndarray:
    """Samples per second of the rows of ``terms`` at the family's parameters."""
    t = np.asarray(terms, dtype=float).reshape(-1, 3)
    return t[:, 2] / (t[:, 0] / compute_efficiency + t[:, 1] + host_sync_seconds)


def fit_family(
    terms: Sequence[StepTerms], published: Sequence[float], start: tuple[float, float]
) -> tuple[float, float]:
    """``(compute_efficiency, host_sync_seconds)`` minimising the rows' squared relative
    error, in log space, from ``start``."""
    want = np.asarray(published, dtype=float)

    def residuals(x: np.ndarray) -> np.ndarray:
        return predict_family(terms, *np.exp(x)) / want - 1.0

    bounds = (np.log(LOWER_BOUNDS), np.log(UPPER_BOUNDS))
    result = least_squares(residuals, np.log(start), bounds=bounds, method="trf")
    eta, sync = (float(v) for v in np.exp(result.x))
    return eta, sync


class FamilyCalibration(NamedTuple):
    """A family's fit over ``rows`` and what its closed form predicts for each."""

    rows: tuple[FamilyRow, ...]
    parameters: dict[str, float]  # FAMILY_PARAMETERS' fitted values
    predicted: tuple[float, ...]  # samples per second, per row
    leave_one_out: tuple[float, ...]  # each row predicted by a fit without it

    def row_records(self, model_predicted: Sequence[float]) -> list[dict]:
        """One JSON-ready record per row: the prediction and error the model gives at the
        fitted parameters (``model_predicted``: the closed form is exact, so the two agree
        to rounding), the closed form's, the leave-one-out prediction and the row's terms."""
        records = []
        for row, model, closed, loo in zip(
            self.rows, model_predicted, self.predicted, self.leave_one_out, strict=True
        ):
            records.append(
                {
                    "row": row.row,
                    "system": row.system,
                    "replicas": row.replicas,
                    "gradient_accumulation": row.gradient_accumulation,
                    "published_samples_per_second": row.published,
                    "predicted_samples_per_second": round(model, 1),
                    "error": round(model / row.published - 1.0, 4),
                    "closed_form_predicted": round(closed, 1),
                    "leave_one_out_predicted": round(loo, 1),
                    "leave_one_out_error": round(loo / row.published - 1.0, 4),
                    "closed_form_terms": row.terms._asdict(),
                }
            )
        return records


def calibrate_family(rows: Sequence[FamilyRow], shared_efficiency: float) -> FamilyCalibration:
    """The family's two parameters over ``rows`` (from the shared compute efficiency and
    ``HOST_SYNC_START``), each row's closed-form prediction and its leave-one-out one (from
    the full fit's values)."""
    rows = tuple(rows)
    terms = [row.terms for row in rows]
    published = [row.published for row in rows]
    eta, sync = fit_family(terms, published, (shared_efficiency, HOST_SYNC_START))
    loo = []
    for i in range(len(rows)):
        keep = [j for j in range(len(rows)) if j != i]
        held = fit_family([terms[j] for j in keep], [published[j] for j in keep], (eta, sync))
        loo.append(float(predict_family(terms[i : i + 1], *held)[0]))
    predicted = tuple(float(p) for p in predict_family(terms, eta, sync))
    parameters: dict[str, float] = dict(zip(FAMILY_PARAMETERS, (eta, sync), strict=True))
    return FamilyCalibration(rows, parameters, predicted, tuple(loo))


def family_record(
    calibration: FamilyCalibration,
    model_predicted: Sequence[float],
    *,
    fitted_by: str,
    data: str,
    fixed_cost_share: float,
) -> dict:
    """``calibration.json``'s record of the family: its parameters, how and on what they were
    fitted, the largest fixed-cost share of its rows (``hardware.load_calibration``) and the
    rows with their terms, from which :func:`calibrate_family` gives the fit again."""
    rows = calibration.row_records(model_predicted)
    return {
        "parameters": calibration.parameters,
        "fitted_by": fitted_by,
        "data": data,
        "fixed_cost_share": round(fixed_cost_share, 4),
        "closed_form": "step seconds = a / compute_efficiency + b + host_sync_seconds",
        "rows": [{k: v for k, v in r.items() if k != "closed_form_predicted"} for r in rows],
    }
