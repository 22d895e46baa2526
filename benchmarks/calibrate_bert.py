"""Fits the two structural terms Graphcore's Mk2 MLPerf BERT-Large rows constrain.

Why: with the parameters fitted on ResNet-50 alone, every published BERT-Large row deviates
the same way. Per replica, the steps of Graphcore's four MLPerf v2.0 Bow rows fit ``0.201 s +
4.42 ms x GA`` (gradient accumulation 36 to 256, residuals within 0.6 %), where the model's
fit ``0.062 s + 5.98 ms x GA``: a BERT micro-batch runs faster than ResNet-50's sustained
fraction of peak says (its large matmuls keep the AMP units busier than convolutions and
batch norms do), and each weight update pays about a tenth of a second the model lacks, at
every scale from one POD16 instance to four POD256 instances, a cost that does not shrink on
the faster Bow IPU.

What the fit sets, for every program through its structure (``hardware.ModelParameters``),
never through a model's name: ``matmul_efficiency``, the sustained rate of matmul FLOPs (a
program's FLOPs are split by its operations' classes: a transformer's are nearly all
matmuls, ResNet-50's nearly none), and ``multi_ipu_sync_seconds``, the fixed cost of the
host call that ends a step of a replica spread over several IPUs (every BERT row's replica
spans 4 or 8 IPUs, with or without offloaded optimiser state; ResNet-50's one). Graphcore's
BERT returns to its Python loop after every call (``batches_per_step`` 1), which prepares
the next call's arrays, reads the outputs and calls ``updateOptimizerFromHost``
(mlcommons/training_results_v2.0, ``Graphcore/benchmarks/bert/implementations/popart/
bert.py``); the rows cannot tell a cost per call from one per weight update (each of their
calls is one update), and the per-call form is the one the ResNeXt and EfficientNet rows,
104 updates a call, allow. Every other parameter stays the ResNet-50 fit's
(``benchmarks/calibrate.py``). The record also keeps the old whole-program values (every
FLOP at the fitted efficiency, the fitted cost per call as host synchronisation of any
replica), which ``poprun-emu --calibration-family BERT`` applies to any program.

Rows: the ``BERT`` fit's of the declared calibration set (``benchmarks/calibration_set.json``):
the Mk2 MLPerf BERT-Large rows on one Pod (v1.0
POD16 and POD64 on SDK 2.1, v1.1 POD16 and POD64 on SDK 2.3), each an offline run of
``examples/bert.py`` as Graphcore's configuration file sets it. The rows across Pods are left
to the shared fit's GW-Link model, which they check: v1.1's POD128 row. The Bow rows (MLPerf
v2.0) stay out of the fit too: ``benchmarks/validate.py --bert`` checks them.

Method: the model's step of a row is exactly ``a / eta + b + n x s`` in the matmul efficiency
``eta`` and the multi-IPU cost ``s``, with ``n`` the row's multi-IPU host calls per step (its
report's ``multi_ipu_sync_calls``): the matmuls' arithmetic time is proportional to
``1 / eta``; other FLOPs, compute sets, memory time, the collectives and the update depend on
neither. So each row is run at two trial efficiencies (``s`` = 0) to solve for its ``a`` and
``b``; the parameters then minimise the squared relative throughput error
(``scipy.optimize.least_squares``), and each row is predicted again by a fit without it
(leave-one-out): ``popdist_emu.calibration``'s family fit, which this command feeds with the
runs only the example can give. A last run at the fitted values checks the closed form
against the model. The trial values are written to ``hardware/calibration.json`` while the
runs read it (the file is restored afterwards unless ``--write`` stores the fit, with each
row's ``a``, ``b`` and ``n``, from which the fit can be made again without a run).

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
import json
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import calibration_set
import validate  # this folder's: an offline run of a row's example
from published_rows import ExampleRow
from results_file import write_results

import hardware
from popdist_emu import calibration

FAMILY = "BERT"
DATA = "MLPerf Training v1.0 and v1.1 Graphcore BERT-Large, Mk2 POD16 and POD64 (sequences/s)"
MODELS = ("BERT-Large",)  # what the rows ran, for the reports' band


def _steps(rows: Sequence[ExampleRow], values: dict[str, float]) -> list[tuple]:
    """Each row's simulated (step seconds, samples per step) and its example's report, with
    the family's parameters at ``values``."""
    with (
        calibration.trial_family_parameters(FAMILY, values),
        ThreadPoolExecutor(max_workers=2) as pool,
    ):
        reports = list(pool.map(validate.run_example, rows))
    return [
        (r["simulated_step_seconds"], r[row.figure] * r["simulated_step_seconds"], r)
        for r, row in zip(reports, rows, strict=True)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fit in calibration.json")
    args = parser.parse_args(argv)

    rows = [row for row in calibration_set.fit_rows(FAMILY) if isinstance(row, ExampleRow)]
    shared = hardware.load_parameters()
    eta1, eta2 = calibration.trial_efficiencies(shared.compute_efficiency)
    first = _steps(rows, {"matmul_efficiency": eta1, "multi_ipu_sync_seconds": 0.0})
    second = _steps(rows, {"matmul_efficiency": eta2, "multi_ipu_sync_seconds": 0.0})
    fitted_rows = []
    for row, (t1, samples, report), (t2, _, _) in zip(rows, first, second, strict=True):
        launch = row.launch.split()
        calls = float(report["multi_ipu_sync_calls"])
        terms = calibration.solve_step_terms((t1, t2), (eta1, eta2), 0.0, samples, calls)
        fitted_rows.append(
            calibration.FamilyRow(
                row.key,
                launch[1],
                int(launch[3]),
                row.value("--gradient-accumulation"),
                row.published,
                terms,
            )
        )
    fit = calibration.calibrate_family(fitted_rows, eta1)
    final = _steps(rows, fit.parameters)
    model = [samples / seconds for seconds, samples, _ in final]
    share = max(report["fixed_cost_share"] for _, _, report in final)  # hardware.fixed_cost_share
    records = fit.row_records(model)
    for record in records:
        print(json.dumps({k: v for k, v in record.items() if k != "closed_form_terms"}), flush=True)
    summary = {
        "family": FAMILY,
        "parameters": fit.parameters,
        "shared_compute_efficiency": eta1,
        "fixed_cost_share": round(share, 4),
        "max_abs_error": max(abs(r["error"]) for r in records),
        "max_abs_leave_one_out_error": max(abs(r["leave_one_out_error"]) for r in records),
    }
    print(json.dumps(summary), flush=True)
    shown = [{k: v for k, v in r.items() if k != "closed_form_terms"} for r in records]
    write_results("calibrate_bert", {"summary": summary, "rows": shown})
    if args.write:
        record = calibration.family_record(
            fit,
            model,
            fitted_by="python benchmarks/calibrate_bert.py --write",
            data=DATA,
            fixed_cost_share=share,
            shared_host_sync=shared.host_sync_seconds,
            model_families=MODELS,
        )
        try:
            calibration.write_family_record(FAMILY, record)
        except OSError as error:  # one line; the file is unchanged
            print(f"calibrate_bert.py: {error.strerror}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
