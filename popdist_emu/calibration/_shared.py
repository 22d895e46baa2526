"""The shared fit: the hardware model's five free parameters from published ResNet-50 rows.

Each published MLPerf Training v1.1 configuration (replicas, gradient accumulation,
instances, hosts) is simulated on its system from one ResNet-50 step profile, and the
parameters minimise the squared relative throughput error, in log space, with a weak
log-normal prior on each parameter (``hardware.ModelParameters``' defaults) so that
under-determined fits (leave-one-out) stay near physical values. Each row is also predicted
by a fit made without it (leave-one-out).

References:
    mlcommons/training_results_v1.1, Graphcore ResNet-50 result logs (throughput =
    1,281,167 ImageNet images / median epoch time of the runs).
    Branch, Coleman and Li, "A subspace, interior, and conjugate gradient method for
    large-scale bound-constrained minimization problems", SIAM J. Sci. Comput. 21(1), 1999
    (scipy.optimize.least_squares' "trf" method).
    Hastie, Tibshirani and Friedman, "The Elements of Statistical Learning", 2nd ed.,
    section 7.10 (leave-one-out).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy.optimize import least_squares

import hardware


class PublishedRow(NamedTuple):
    """One published configuration of the shared fit and its throughput."""

    system: str  # hardware.SYSTEMS' name
    replicas: int
    gradient_accumulation: int
    instances: int
    hosts: int
    samples_per_second: float  # published


# MLPerf Training v1.1 Graphcore ResNet-50, micro-batch 20, 1 IPU per replica, SDK 2.3.0.
RESNET50_MICRO_BATCH = 20
RESNET50_ROWS = (
    PublishedRow("pod16", 16, 10, 8, 1, 29.5e3),
    PublishedRow("pod64", 64, 3, 32, 4, 108e3),
    PublishedRow("pod128", 128, 2, 64, 8, 178e3),
    PublishedRow("pod256", 256, 2, 128, 16, 326e3),
)
RESNET50_DATA = "MLPerf Training v1.1 Graphcore ResNet-50, POD16/64/128/256"
SHARED_PARAMETERS = (
    "compute_efficiency",
    "ipu_link_latency",
    "gw_link_latency",
    "host_sync_seconds",
    "compute_set_seconds",
)
PRIOR = hardware.ModelParameters()  # the documented priors of each parameter
PRIOR_WEIGHT = 0.02  # residual per e-fold away from the prior: a weak pull only
# Bounds of each parameter, in SHARED_PARAMETERS' order: physical ranges, wide.
LOWER_BOUNDS = (1e-3, 1e-9, 1e-9, 1e-9, 1e-9)
UPPER_BOUNDS = (1.0, 1e-2, 1e-1, 1e-1, 1e-4)


def simulate_row(
    profile: hardware.StepProfile, row: PublishedRow, parameters: hardware.ModelParameters
) -> hardware.StepSimulation:
    """The simulated step of one published configuration."""
    layout = hardware.ReplicaLayout(
        num_replicas=row.replicas,
        num_instances=row.instances,
        hosts=tuple(f"host{i}" for i in range(row.hosts)),
    )
    step = profile.replace(gradient_accumulation=row.gradient_accumulation)
    system = hardware.get_system(row.system)
    return hardware.simulate_step(step, layout, system, parameters=parameters)


def predict_row(
    profile: hardware.StepProfile, row: PublishedRow, parameters: hardware.ModelParameters
) -> float:
    """Predicted samples per second of one published configuration."""
    return simulate_row(profile, row, parameters).samples_per_second


def _parameters(x: np.ndarray) -> hardware.ModelParameters:
    """The shared parameters at ``x`` (logs), the structural terms other fits set as the
    calibration file has them (a ResNet-50 step barely weighs them: a few matmul FLOPs, no
    offloaded state)."""
    values = dict(zip(SHARED_PARAMETERS, np.exp(x), strict=True))
    values["compute_efficiency"] = min(values["compute_efficiency"], 1.0)
    return dataclasses.replace(hardware.load_parameters(), **values)


def fit_shared(
    profile: hardware.StepProfile, rows: Sequence[PublishedRow]
) -> hardware.ModelParameters:
    """The parameters that minimise the rows' squared relative error (in log space, with
    the weak prior), from the prior."""
    x0 = np.log([getattr(PRIOR, name) for name in SHARED_PARAMETERS])

    def residuals(x: np.ndarray) -> np.ndarray:
        parameters = _parameters(x)
        errors = [
            predict_row(profile, row, parameters) / row.samples_per_second - 1 for row in rows
        ]
        return np.concatenate([errors, PRIOR_WEIGHT * (x - x0)])

    bounds = (np.log(LOWER_BOUNDS), np.log(UPPER_BOUNDS))
    result = least_squares(residuals, x0, bounds=bounds, method="trf", x_scale=1.0)
    return _parameters(result.x)


class SharedCalibration(NamedTuple):
    """The shared fit over ``rows`` and what it predicts for each."""

    rows: tuple[PublishedRow, ...]
    parameters: hardware.ModelParameters
    predicted: tuple[float, ...]  # samples per second, per row
    leave_one_out: tuple[float, ...]  # each row predicted by a fit without it
    fixed_cost_share: float  # the largest of the rows' (hardware.fixed_cost_share)

    def row_records(self) -> list[dict]:
        """One JSON-ready record per row, as ``calibration.json`` stores them."""
        return [
            {
                "system": row.system,
                "replicas": row.replicas,
                "gradient_accumulation": row.gradient_accumulation,
                "published_samples_per_second": row.samples_per_second,
                "predicted_samples_per_second": round(predicted, 1),
                "error": round(predicted / row.samples_per_second - 1.0, 4),
                "leave_one_out_predicted": round(loo, 1),
                "leave_one_out_error": round(loo / row.samples_per_second - 1.0, 4),
            }
            for row, predicted, loo in zip(
                self.rows, self.predicted, self.leave_one_out, strict=True
            )
        ]


def calibrate_shared(
    profile: hardware.StepProfile, rows: Sequence[PublishedRow] = RESNET50_ROWS
) -> SharedCalibration:
    """The shared fit over ``rows`` from one step profile (ResNet-50's at micro-batch 20 for
    the shipped file), each row's prediction, and its leave-one-out prediction."""
    rows = tuple(rows)
    parameters = fit_shared(profile, rows)
    predicted, loo = [], []
    for i, row in enumerate(rows):
        held_out = fit_shared(profile, rows[:i] + rows[i + 1 :])
        predicted.append(predict_row(profile, row, parameters))
        loo.append(predict_row(profile, row, held_out))
    share = max(hardware.fixed_cost_share(simulate_row(profile, row, parameters)) for row in rows)
    return SharedCalibration(rows, parameters, tuple(predicted), tuple(loo), share)


def shared_record(
    calibration: SharedCalibration,
    *,
    fitted_by: str,
    data: str = RESNET50_DATA,
    model_families: Sequence[str] = ("ResNet-50",),
) -> dict:
    """``calibration.json``'s shared part: the parameters, how and on what they were fitted,
    the families the compute efficiency was fitted on (``hardware.load_calibration``) and the
    rows."""
    return {
        # Its own parameters only: the structural terms belong to the fits that set them.
        "parameters": {
            k: v for k, v in calibration.parameters.to_json().items() if k in SHARED_PARAMETERS
        },
        "fitted_by": fitted_by,
        "data": data,
        "model_families": list(model_families),
        "fixed_cost_share": round(calibration.fixed_cost_share, 4),
        "rows": calibration.row_records(),
    }
