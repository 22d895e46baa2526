"""A family's fit: the structural terms its rows constrain, in closed form.

Graphcore's BERT-Large rows all deviate the same way from the shared (ResNet-50) fit: a large
matmul keeps the IPU busier than ResNet-50's convolutions, and each call of its multi-IPU
replicas pays a fixed cost the single-IPU ResNet-50 rows never show. Their fit sets the two
terms of ``hardware.ModelParameters`` that apply through a program's structure:
``matmul_efficiency`` (the sustained rate of matmul FLOPs, whatever the model) and
``multi_ipu_sync_seconds`` (the fixed cost of the host call that ends a step of a replica
spread over several IPUs); every other parameter stays shared. A row's simulated step is
exactly ``a / matmul_efficiency + b + n x multi_ipu_sync_seconds`` seconds for its samples:
the matmuls' arithmetic time is proportional to ``1 / matmul_efficiency``; ``n`` is the
step's multi-IPU host calls (``hardware.multi_ipu_sync_calls``, 1 or 0); the rest (other
FLOPs, compute sets, memory, the collectives, the update) depends on neither. So two runs
of a row at two trial efficiencies give its ``a`` and ``b`` (:func:`solve_step_terms`), and
the two parameters then minimise the squared relative throughput error of the closed form
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

FAMILY_PARAMETERS = ("matmul_efficiency", "multi_ipu_sync_seconds")
TRIAL_SCALE = 1.25  # the second trial efficiency, relative to the shared one
SYNC_START = 0.05  # seconds per call: where the fit starts
# Bounds of (matmul_efficiency, multi_ipu_sync_seconds).
LOWER_BOUNDS = (1e-3, 1e-6)
UPPER_BOUNDS = (1.0, 10.0)


class StepTerms(NamedTuple):
    """A row's simulated step in closed form: ``a / matmul_efficiency + b + calls x
    multi_ipu_sync_seconds`` seconds for ``samples_per_step`` samples."""

    a: float  # seconds at matmul efficiency 1: the step's matmul arithmetic
    b: float  # seconds that depend on neither parameter
    samples_per_step: float
    calls: float = 0.0  # multi-IPU host calls per step (hardware.multi_ipu_sync_calls)


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
    steps: tuple[float, float],
    efficiencies: tuple[float, float],
    sync: float,
    samples: float,
    calls: float = 0.0,
) -> StepTerms:
    """A row's terms from its step seconds at the two trial matmul ``efficiencies``, both
    run with ``sync`` seconds per multi-IPU host call, ``calls`` of them a step."""
    (t1, t2), (eta1, eta2) = steps, efficiencies
    a = (t1 - t2) / (1 / eta1 - 1 / eta2)
    return StepTerms(a, t1 - a / eta1 - calls * sync, samples, calls)


def predict_family(
    terms: Sequence[StepTerms], matmul_efficiency: float, multi_ipu_sync_seconds: float
) -> np.ndarray:
    """Samples per second of the rows of ``terms`` at the family's parameters."""
    t = np.asarray(terms, dtype=float).reshape(-1, 4)
    return t[:, 2] / (t[:, 0] / matmul_efficiency + t[:, 1] + t[:, 3] * multi_ipu_sync_seconds)


def fit_family(
    terms: Sequence[StepTerms], published: Sequence[float], start: tuple[float, float]
) -> tuple[float, float]:
    """``(matmul_efficiency, multi_ipu_sync_seconds)`` minimising the rows' squared relative
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
    ``SYNC_START``), each row's closed-form prediction and its leave-one-out one (from
    the full fit's values)."""
    rows = tuple(rows)
    terms = [row.terms for row in rows]
    published = [row.published for row in rows]
    eta, sync = fit_family(terms, published, (shared_efficiency, SYNC_START))
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
    shared_host_sync: float,
    model_families: Sequence[str] = (),
) -> dict:
    """``calibration.json``'s record of the family: its parameters, how and on what they were
    fitted, the models its rows ran (``model_families``), the largest fixed-cost share of its
    rows (``hardware.load_calibration``), the rows with their terms, from which
    :func:`calibrate_family` gives the fit again, and the whole-program values a user may ask
    for instead of the structural ones (``override``, ``--calibration-family``): every FLOP
    at the fitted efficiency, and the rows' fixed cost per call as host synchronisation of
    any replica (``shared_host_sync`` plus the fitted multi-IPU cost)."""
    rows = calibration.row_records(model_predicted)
    eta, sync = (calibration.parameters[name] for name in FAMILY_PARAMETERS)
    return {
        "parameters": calibration.parameters,
        "override": {
            "compute_efficiency": eta,
            "matmul_efficiency": eta,
            "host_sync_seconds": shared_host_sync + sync,
            "multi_ipu_sync_seconds": 0.0,
        },
        "fitted_by": fitted_by,
        "data": data,
        "model_families": list(model_families),
        "fixed_cost_share": round(fixed_cost_share, 4),
        "closed_form": (
            "step seconds = a / matmul_efficiency + b + calls x multi_ipu_sync_seconds"
        ),
        "rows": [{k: v for k, v in r.items() if k != "closed_form_predicted"} for r in rows],
    }
