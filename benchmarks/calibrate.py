"""Fits the hardware model's five free parameters to published ResNet-50 throughput.

The ResNet-50 step profile comes from compiling (never running) ``examples/resnet50.py``'s
training step at micro-batch 20, FP16, with recomputation, through
``popdist_emu.programs._profile.profile_step``. Each published MLPerf v1.1 configuration (replicas,
gradient accumulation, instances, hosts) is simulated on its system, and the parameters
minimise the squared relative throughput error, with a weak log-normal prior on each
parameter so that under-determined fits (leave-one-out) stay near physical values.

Prints one JSON line per system (published and predicted throughput, relative error, and
the leave-one-out prediction made without that row), then one line with the parameters.
``--write`` stores them in ``hardware/calibration.json``, which the model loads.

Run::

    python benchmarks/calibrate.py [--write]

References:
    mlcommons/training_results_v1.1, Graphcore ResNet-50 result logs (throughput =
    1,281,167 ImageNet images / median epoch time of the runs).
    Branch, Coleman and Li, "A subspace, interior, and conjugate gradient method for
    large-scale bound-constrained minimization problems", SIAM J. Sci. Comput. 21(1), 1999
    (scipy.optimize.least_squares' "trf" method).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import sys
import time

import numpy as np
from scipy.optimize import least_squares

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import hardware  # noqa: E402
import popdist_emu as popdist  # noqa: E402
from hardware._parameters import CALIBRATION_FILE  # noqa: E402

# (system, replicas, gradient accumulation, instances, hosts, published images/s):
# MLPerf Training v1.1 Graphcore ResNet-50, micro-batch 20, 1 IPU per replica, SDK 2.3.0.
PUBLISHED = (
    ("pod16", 16, 10, 8, 1, 29.5e3),
    ("pod64", 64, 3, 32, 4, 108e3),
    ("pod128", 128, 2, 64, 8, 178e3),
    ("pod256", 256, 2, 128, 16, 326e3),
)
MICRO_BATCH = 20
FITTED = (
    "compute_efficiency",
    "ipu_link_latency",
    "gw_link_latency",
    "host_sync_seconds",
    "compute_set_seconds",
)
PRIOR = hardware.ModelParameters()  # the documented priors of each parameter
PRIOR_WEIGHT = 0.02  # residual per e-fold away from the prior: a weak pull only


def _layout(replicas: int, instances: int, hosts: int) -> hardware.ReplicaLayout:
    return hardware.ReplicaLayout(
        num_replicas=replicas,
        num_instances=instances,
        hosts=tuple(f"host{i}" for i in range(hosts)),
    )


def simulate(profile, row, params: hardware.ModelParameters) -> hardware.StepSimulation:
    """The simulated step of one published configuration."""
    system, replicas, ga, instances, hosts, _ = row
    step = profile.replace(gradient_accumulation=ga)
    return hardware.simulate_step(
        step, _layout(replicas, instances, hosts), hardware.get_system(system), parameters=params
    )


def predict(profile, row, params: hardware.ModelParameters) -> float:
    """Predicted images/s of one published configuration."""
    return simulate(profile, row, params).samples_per_second


def _params(x: np.ndarray) -> hardware.ModelParameters:
    values = dict(zip(FITTED, np.exp(x), strict=True))
    values["compute_efficiency"] = min(values["compute_efficiency"], 1.0)
    return hardware.ModelParameters(**values)


def fit(profile, rows) -> hardware.ModelParameters:
    """Least squares on relative error over ``rows``, parameters in log space."""
    x0 = np.log([getattr(PRIOR, name) for name in FITTED])

    def residuals(x):
        params = _params(x)
        errors = [predict(profile, row, params) / row[-1] - 1.0 for row in rows]
        return np.concatenate([errors, PRIOR_WEIGHT * (x - x0)])

    upper = np.log([1.0, 1e-2, 1e-1, 1e-1, 1e-4])
    lower = np.log([1e-3, 1e-9, 1e-9, 1e-9, 1e-9])
    result = least_squares(residuals, x0, bounds=(lower, upper), method="trf", x_scale=1.0)
    return _params(result.x)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store hardware/calibration.json")
    args = parser.parse_args(argv)

    import resnet50

    start = time.perf_counter()
    profile = resnet50.profile(MICRO_BATCH)
    compile_seconds = time.perf_counter() - start

    params = fit(profile, PUBLISHED)
    rows = []
    for i, row in enumerate(PUBLISHED):
        held_out = fit(profile, PUBLISHED[:i] + PUBLISHED[i + 1 :])
        predicted = predict(profile, row, params)
        loo = predict(profile, row, held_out)
        line = {
            "system": row[0],
            "replicas": row[1],
            "gradient_accumulation": row[2],
            "published_samples_per_second": row[-1],
            "predicted_samples_per_second": round(predicted, 1),
            "error": round(predicted / row[-1] - 1.0, 4),
            "leave_one_out_predicted": round(loo, 1),
            "leave_one_out_error": round(loo / row[-1] - 1.0, 4),
        }
        rows.append(line)
        print(json.dumps(line), flush=True)
    # How much of the rows' compute is the fixed cost of operations (hardware._uncertainty).
    share = max(hardware.fixed_cost_share(simulate(profile, row, params)) for row in PUBLISHED)
    summary = {
        "parameters": params.to_json(),
        "fixed_cost_share": round(share, 4),
        "max_abs_error": max(abs(r["error"]) for r in rows),
        "max_abs_leave_one_out_error": max(abs(r["leave_one_out_error"]) for r in rows),
        "profile_compile_seconds": round(compile_seconds, 1),
        "profile": {
            k: v
            for k, v in dataclasses.asdict(profile).items()
            if isinstance(v, int | float | str) and not isinstance(v, bool)
        },
    }
    print(json.dumps(summary), flush=True)
    if args.write:
        record = {
            "parameters": params.to_json(),
            "fitted_by": "python benchmarks/calibrate.py --write",
            "data": "MLPerf Training v1.1 Graphcore ResNet-50, POD16/64/128/256",
            # The model the compute efficiency was fitted on (hardware._uncertainty).
            "model_families": ["ResNet-50"],
            "fixed_cost_share": round(share, 4),
            "rows": rows,
        }
        if CALIBRATION_FILE.exists():  # the families' own fits (calibrate_bert.py) stay
            families = json.loads(CALIBRATION_FILE.read_text()).get("families")
            if families:
                record["families"] = families
        popdist.write_atomically(CALIBRATION_FILE, json.dumps(record, indent=2) + "\n")
    if not all(math.isfinite(r["predicted_samples_per_second"]) for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
