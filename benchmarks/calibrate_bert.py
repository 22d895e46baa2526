"""Fits the BERT family's two parameters to Graphcore's Mk2 MLPerf BERT-Large rows.

Why a family of its own: with the parameters fitted on ResNet-50 alone, every published
BERT-Large row deviates the same way. Per replica, the steps of Graphcore's four MLPerf v2.0
Bow rows fit ``0.201 s + 4.42 ms x GA`` (gradient accumulation 36 to 256, residuals within
0.6 %), where the model's fit ``0.062 s + 5.98 ms x GA``: a BERT micro-batch runs faster than
ResNet-50's sustained fraction of peak says (its large matmuls keep the AMP units busier
than convolutions and batch norms do), and each weight update pays about a tenth of a second
the model lacks, at every scale from one POD16 instance to four POD256 instances. That cost
does not shrink on the faster Bow IPU, so it is host-side: Graphcore's BERT returns to the
host after every weight update (``batches_per_step`` 1), where its loop prepares the next
step's arrays, reads the outputs and calls ``updateOptimizerFromHost`` with the step's
learning rate (mlcommons/training_results_v2.0, ``Graphcore/benchmarks/bert/implementations/
popart/bert.py``, ``bert_process_data``). The two parameters are the family's
``compute_efficiency`` and ``host_sync_seconds`` (the fixed cost of the host call that ends a
step); every other parameter stays the ResNet-50 fit's (``benchmarks/calibrate.py``).

Rows: the Mk2 MLPerf BERT-Large rows on one Pod, ``validate.BERT_CALIBRATION_ROWS`` (v1.0
POD16 and POD64 on SDK 2.1, v1.1 POD16 and POD64 on SDK 2.3), each an offline run of
``examples/bert.py`` as Graphcore's configuration file sets it. The rows across Pods are left
to the shared fit's GW-Link model, which they check: v1.1's POD128 row (with it in the fit,
the worst fitted row is 2.7 % off, as POD64's step grows 6 % from one Pod to two where the
model's grows 2 %). The Bow rows (MLPerf v2.0) stay out of the fit too:
``benchmarks/validate.py --bert`` checks them.

Method: the model's step of a row is exactly ``a / eta + b + sync`` in the family's
efficiency ``eta`` and host synchronisation ``sync`` (a stage's arithmetic time is
proportional to ``1 / eta``; its compute-set and memory time, the collectives and the
update do not depend on either), so each row is run at two trial efficiencies to solve for
its ``a`` and ``b``; the parameters then minimise the squared relative throughput error
(``scipy.optimize.least_squares``), and each row is predicted again by a fit without it
(leave-one-out). A last run at the fitted values checks the closed form against the model.
The trial values are written to ``hardware/calibration.json`` while the runs read it (the
file is restored afterwards unless ``--write`` stores the fit).

Run::

    python benchmarks/calibrate_bert.py [--write]     # about 10 minutes on 2 cores

References:
    mlcommons/training_results_v1.0 and v1.1, Graphcore BERT-Large result logs and
    configurations (``benchmarks/published_rows.md`` derives the throughput); Hastie,
    Tibshirani and Friedman, "The Elements of Statistical Learning", 2nd ed., section 7.10
    (leave-one-out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent))

import validate

import hardware
import popdist_emu as popdist
from hardware._parameters import CALIBRATION_FILE

FAMILY = "BERT"
DATA = "MLPerf Training v1.0 and v1.1 Graphcore BERT-Large, Mk2 POD16 and POD64 (sequences/s)"
TRIAL_SCALE = 1.25  # the second trial efficiency, relative to the shared one


@contextlib.contextmanager
def _family_parameters(values: dict[str, float] | None) -> Iterator[None]:
    """``hardware/calibration.json`` with the family's parameters set to ``values`` (none:
    the shared ones apply) while the block runs; the file's text is restored afterwards."""
    original = CALIBRATION_FILE.read_text()
    record = json.loads(original)
    families = dict(record.get("families", {}))
    families.pop(FAMILY, None)
    if values is not None:
        families[FAMILY] = {"parameters": values}
    record["families"] = families
    popdist.write_atomically(CALIBRATION_FILE, json.dumps(record, indent=2) + "\n")
    try:
        yield
    finally:
        popdist.write_atomically(CALIBRATION_FILE, original)


def _reports(rows, values: dict[str, float] | None) -> list[dict]:
    """Each row's example report with the family's parameters at ``values``."""
    with _family_parameters(values), ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(validate.run_example, rows))


def _steps(rows, reports: list[dict]) -> list[tuple[float, float]]:
    """Each row's simulated (step seconds, samples per step)."""
    return [
        (r["simulated_step_seconds"], r[row.figure] * r["simulated_step_seconds"])
        for r, row in zip(reports, rows, strict=True)
    ]


def _predict(terms: np.ndarray, eta: float, sync: float) -> np.ndarray:
    """Steps of the rows from their ``(a, b, samples)`` terms."""
    return terms[:, 2] / (terms[:, 0] / eta + terms[:, 1] + sync)


def _fit(terms: np.ndarray, published: np.ndarray, start: tuple[float, float]):
    def residuals(x):
        return _predict(terms, *np.exp(x)) / published - 1.0

    lower, upper = np.log([1e-3, 1e-6]), np.log([1.0, 10.0])
    result = least_squares(residuals, np.log(start), bounds=(lower, upper), method="trf")
    return tuple(float(v) for v in np.exp(result.x))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fit in calibration.json")
    args = parser.parse_args(argv)

    rows = validate.BERT_CALIBRATION_ROWS
    shared = hardware.load_parameters()
    eta1, sync = shared.compute_efficiency, shared.host_sync_seconds
    eta2 = min(eta1 * TRIAL_SCALE, 1.0)
    first = _steps(rows, _reports(rows, None))
    second = _steps(rows, _reports(rows, {"compute_efficiency": eta2, "host_sync_seconds": sync}))
    terms = []
    for (t1, samples), (t2, _) in zip(first, second, strict=True):
        a = (t1 - t2) / (1 / eta1 - 1 / eta2)
        terms.append((a, t1 - a / eta1 - sync, samples))
    terms_array = np.array(terms)
    published = np.array([row.published for row in rows])
    eta, host_sync = _fit(terms_array, published, (eta1, 0.05))
    predicted = _predict(terms_array, eta, host_sync)
    loo = []
    for i in range(len(rows)):
        keep = [j for j in range(len(rows)) if j != i]
        held = _fit(terms_array[keep], published[keep], (eta, host_sync))
        loo.append(float(_predict(terms_array[[i]], *held)[0]))
    fitted = {"compute_efficiency": eta, "host_sync_seconds": host_sync}
    final = _reports(rows, fitted)
    checked = _steps(rows, final)
    share = max(r["fixed_cost_share"] for r in final)  # hardware._uncertainty
    records = []
    for i, row in enumerate(rows):
        launch = row.launch.split()
        model = checked[i][1] / checked[i][0]
        record = {
            "row": row.key,
            "system": launch[1],
            "replicas": int(launch[3]),
            "gradient_accumulation": row.value("--gradient-accumulation"),
            "published_samples_per_second": row.published,
            "predicted_samples_per_second": round(model, 1),
            "error": round(model / row.published - 1.0, 4),
            "closed_form_predicted": round(float(predicted[i]), 1),
            "leave_one_out_predicted": round(loo[i], 1),
            "leave_one_out_error": round(loo[i] / row.published - 1.0, 4),
        }
        records.append(record)
        print(json.dumps(record), flush=True)
    summary = {
        "family": FAMILY,
        "parameters": fitted,
        "shared_compute_efficiency": eta1,
        "fixed_cost_share": round(share, 4),
        "max_abs_error": max(abs(r["error"]) for r in records),
        "max_abs_leave_one_out_error": max(abs(r["leave_one_out_error"]) for r in records),
    }
    print(json.dumps(summary), flush=True)
    if args.write:
        record = json.loads(CALIBRATION_FILE.read_text())
        record.setdefault("families", {})[FAMILY] = {
            "parameters": fitted,
            "fitted_by": "python benchmarks/calibrate_bert.py --write",
            "data": DATA,
            "fixed_cost_share": round(share, 4),
            "rows": [{k: v for k, v in r.items() if k != "closed_form_predicted"} for r in records],
        }
        popdist.write_atomically(CALIBRATION_FILE, json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
