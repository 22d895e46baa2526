"""Fits the hardware model's five free parameters to published ResNet-50 throughput.

The rows are the ``ResNet-50`` fit's of the declared calibration set
(``benchmarks/calibration_set.json``). The ResNet-50 step profile comes from compiling (never
running) ``examples/resnet50.py``'s training step at their micro-batch (20), FP16, with
recomputation, through ``popdist_emu.profile_step``. Each published MLPerf v1.1
configuration (replicas, gradient accumulation, instances, hosts) is simulated on its system,
and the parameters minimise the squared relative throughput error, with a weak log-normal
prior on each parameter so that under-determined fits (leave-one-out) stay near physical
values: ``popdist_emu.calibration``'s shared fit, which this command feeds with the profile
only the example can give.

Prints one JSON line per system (published and predicted throughput, relative error, and
the leave-one-out prediction made without that row), then one line with the parameters.
``--write`` stores them in ``hardware/calibration.json``, which the model loads.

Run::

    python benchmarks/calibrate.py [--write]

References:
    mlcommons/training_results_v1.1, Graphcore ResNet-50 result logs (throughput =
    1,281,167 ImageNet images / median epoch time of the runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import sys
import time

import calibration_set
from published_rows import Row
from results_file import write_results
from validate import hosts

from popdist_emu import calibration

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIT = "ResNet-50"  # the declared set's fit this command makes


def published_rows() -> tuple[int, list[calibration.PublishedRow]]:
    """The fit's rows as ``benchmarks/calibration_set.json`` declares them, as the shared
    fit takes them (instances and hosts as the rows' launch lines), and their micro-batch."""
    rows = calibration_set.fit_rows(FIT)
    if not all(isinstance(row, Row) for row in rows):
        raise SystemExit(f"calibrate.py: the {FIT} fit may only name ResNet-50 rows")
    micro_batches = {row.micro_batch for row in rows if isinstance(row, Row)}
    if len(micro_batches) != 1:
        raise SystemExit(f"calibrate.py: the {FIT} fit's rows must share one micro-batch")
    published = [
        calibration.PublishedRow(
            row.system,
            row.replicas,
            row.gradient_accumulation,
            row.instances or row.replicas // 2,
            hosts(row.replicas),
            row.published,
        )
        for row in rows
        if isinstance(row, Row)
    ]
    return micro_batches.pop(), published


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store hardware/calibration.json")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT / "examples"))
    import resnet50

    micro_batch, published = published_rows()
    start = time.perf_counter()
    profile = resnet50.profile(micro_batch)
    compile_seconds = time.perf_counter() - start

    fit = calibration.calibrate_shared(profile, published)
    rows = fit.row_records()
    for line in rows:
        print(json.dumps(line), flush=True)
    summary = {
        "parameters": fit.parameters.to_json(),
        "fixed_cost_share": round(fit.fixed_cost_share, 4),
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
    write_results("calibrate", {"summary": summary, "rows": rows})
    if args.write:
        record = calibration.shared_record(fit, fitted_by="python benchmarks/calibrate.py --write")
        try:
            calibration.write_shared_record(record)
        except OSError as error:  # one line; the file is unchanged
            print(f"calibrate.py: {error.strerror}", file=sys.stderr)
            return 1
    if not all(math.isfinite(r["predicted_samples_per_second"]) for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
