"""Cross-validates the hardware model against every published row whose step is profiled.

Each row is a configuration Graphcore ran and published (``benchmarks/published_rows.md``
lists them with their sources and how MLPerf throughputs are derived from the logs;
``published_rows.py`` and ``bert_rows.py`` hold them as data). ``benchmarks/row_features.py``
compiles each row's step once, from shapes, by the example that models it (ResNet-50's profile
in-process; every other row an offline run of its example under ``poprun-emu`` as Graphcore's
configuration sets it) and stores it as features: the step's coefficient on each fitted term
(``popdist_emu.calibration.RowFeatures``). This command fits the terms on the declared
calibration set (``benchmarks/calibration_set.json``: which rows each term is fitted on) and
reports for every row its error three ways:

- in-sample: the fit on the whole set (a calibration row's own error);
- leave-one-row-out: a fit without that row (for a row no fit uses, the same fit);
- leave-one-family-out: a fit without any row of its model's family (the set's
  ``families``): how the model does on a family it never saw.

Then the bands (``calibration.bands``: the central 80 % of the cross-validated log residuals
of rows like the run, family seen or not) and their coverage, the share of rows whose
published figure lies inside the band made without that row; and, for each group of rows that
differ only in system size, the predicted against the published speed-up from the smallest
system to each larger one; and for each row an offline run of Graphcore's own program covers
(``benchmarks/graphcore_programs.py``'s results: BERT-Base B15 by ``nlp/bert/pytorch``, ViT
C8 by ``vision/vit/pytorch``, EfficientNet-B4 C4 by ``vision/cnns/pytorch``), the figure
predicted from that program beside the example's, both at the shipped parameters. Rows of an
older software release (SDK 2.1: A1, A2, A3, A4) stay in every figure; their source names the
release. All refits take seconds.

Writes ``benchmarks/results/validate.json`` (``results_file.py``), which
``docs/hardware-model.md`` renders and whose summary ``python -m docs_build.readme`` puts in
the README; prints one JSON line per row, per scale-out pair and the summary. A run on
another ``--set`` or ``--features`` file (an experiment) only prints: the results file and
the shipped bands stay the declared set's.

Run::

    python benchmarks/row_features.py     # once per row: the expensive part (minutes a row)
    python benchmarks/validate.py         # seconds

References:
    mlcommons/training_results_v1.0, v1.1 and v2.0, Graphcore result logs; Graphcore,
    "Performance Results" (graphcore.ai/performance-results); Hastie, Tibshirani and
    Friedman, "The Elements of Statistical Learning", 2nd ed., section 7.10.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import calibration_set
from published_rows import ExampleRow, Row
from results_file import write_results

import hardware
from popdist_emu import arguments, calibration

ROOT = Path(__file__).resolve().parents[1]


def hosts(replicas: int) -> int:
    """The calibration rows' hosts for ``replicas`` one-IPU replicas: 1 per Pod16, 4 per Pod64."""
    return 1 if replicas <= 16 else replicas // 16


def run_example(row: ExampleRow, environ: dict[str, str] | None = None) -> dict:
    """The final JSON line of an offline run of the row's example under ``poprun-emu``, with
    ``environ`` added to the environment (a scaling request, for ``row_features.py``)."""
    launch, words = row.launch, row.words
    poprun = shutil.which("poprun-emu", path=str(Path(sys.executable).parent)) or "poprun-emu"
    command = [poprun, "--offline-mode", "yes", "--only-output-from-instance", "0"]
    command += [*launch.split(), str(ROOT / "examples" / row.example)]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, **(environ or {})}
    out = subprocess.run(
        command + words.split(), capture_output=True, text=True, env=env, timeout=1800
    )
    if out.returncode != 0:
        raise SystemExit(f"validate.py: {' '.join(command)} failed:\n{out.stderr[-2000:]}")
    lines = [line.split(">:", 1)[-1] for line in out.stdout.splitlines()]
    return json.loads(next(line for line in reversed(lines) if line.startswith("{")))


def predict(
    profile: hardware.StepProfile, row: Row, parameters: hardware.ModelParameters | None = None
) -> float:
    """Simulated images per second of ``row`` with ``parameters`` (default: the calibrated
    ones), as ``benchmarks/calibrate.py`` predicts its own rows."""
    instances = row.instances or row.replicas // 2
    layout = (row.system, row.replicas, row.gradient_accumulation, instances)
    published = calibration.PublishedRow(*layout, hosts(row.replicas), row.published)
    return calibration.predict_row(profile, published, parameters or hardware.load_parameters())


def _group(record: dict) -> str:
    """The scale-out group of a row: what it shares with the rows differing from it only in
    system size (model, source, micro-batch, IPUs per replica)."""
    return (
        f"{record['model']}, {record['source']}, micro-batch {record['micro_batch']}, "
        f"{record['ipus_per_replica']} IPU(s) a replica"
    )


def cross_validated_rows(
    stored: dict, declared: calibration.CalibrationSet
) -> tuple[dict[str, float], list[dict], list[calibration.BandRow]]:
    """The full fit's values, each stored row's record (published figure, the three
    predictions and their errors) and what the bands need of each."""
    table = {
        key: calibration.TableRow(
            calibration.RowFeatures.from_json(record), record["published"], record["model"]
        )
        for key, record in stored["rows"].items()
    }
    values, cv = calibration.cross_validate(table, declared)
    records, band_rows = [], []
    for key, record in stored["rows"].items():
        c = cv[key]
        published = record["published"]
        records.append(
            {
                "row": key,
                "model": record["model"],
                "family": calibration.family_of(declared, table[key]),
                "system": record["system"],
                "replicas": record["replicas"],
                "ipus_per_replica": record["ipus_per_replica"],
                "micro_batch": record["micro_batch"],
                "gradient_accumulation": record["gradient_accumulation"],
                "published": published,
                "calibration": c.calibration,
                "family_seen": c.family_seen,
                "in_sample": round(c.in_sample, 1),
                "in_sample_error": round(c.in_sample / published - 1, 4),
                "loo_row": round(c.leave_one_row_out, 1),
                "loo_row_error": round(c.leave_one_row_out / published - 1, 4),
                "loo_family": round(c.leave_one_family_out, 1),
                "loo_family_error": round(c.leave_one_family_out / published - 1, 4),
                "linearity_error": record["linearity_error"],
                "source": record["source"],
            }
        )
        band_rows.append(calibration.BandRow(key, published, c))
    return values, records, band_rows


def scale_out_rows(records: list[dict]) -> list[dict]:
    """Predicted (in-sample) against published speed-up within each scale-out group."""
    groups: dict[str, list[calibration.ScaleRow]] = {}
    for r in records:
        ipus = r["replicas"] * r["ipus_per_replica"]
        row = calibration.ScaleRow(r["row"], ipus, r["published"], r["in_sample"])
        groups.setdefault(_group(r), []).append(row)
    return calibration.scale_out({k: v for k, v in groups.items() if len(v) > 1})


# The offline runs of Graphcore's own programs (benchmarks/graphcore_programs.py writes them).
GRAPHCORE_RUNS = Path(__file__).with_name("results") / "graphcore_programs.json"


def step_difference(program: dict, example: calibration.RowFeatures, values: dict) -> dict:
    """Where a Graphcore program's step differs from the example's: per term, the difference
    in seconds a sample as a share of the example's (terms that move it by 1 % or more,
    largest first); empty without the program's features."""
    if "features" not in program:
        return {}
    own = calibration.RowFeatures.from_json(program["features"])
    ours, theirs = example.term_seconds(values), own.term_seconds(values)
    per_sample = example.step_seconds(values) / example.samples_per_step
    shares = {
        term: (theirs[term] / own.samples_per_step - ours[term] / example.samples_per_step)
        / per_sample
        for term in ours
    }
    big = sorted((t for t in shares if abs(shares[t]) >= 0.01), key=lambda t: -abs(shares[t]))
    return {t: round(shares[t], 4) for t in big}


def graphcore_program_rows(
    records: list[dict], stored: dict, path: Path = GRAPHCORE_RUNS
) -> list[dict]:
    """Each row that an offline run of Graphcore's own program covers (its ``row``): the
    figure predicted from that program beside the one from this project's example, both at
    the shipped parameters (``hardware/calibration.json``, which the program's run read),
    their errors and how far the program's is from the example's."""
    if not path.is_file():
        return []
    shipped = hardware.load_parameters().to_json()
    by_key = {r["row"]: r for r in records}
    out = []
    for run in json.loads(path.read_text())["figures"]:
        key, program = run.get("row"), run.get("simulated_samples_per_s")
        if run.get("mode") != "offline" or key not in by_key or not program:
            continue
        published = by_key[key]["published"]
        features = calibration.RowFeatures.from_json(stored["rows"][key])
        example = features.samples_per_second(shipped)
        out.append(
            {
                "row": key,
                "model": by_key[key]["model"],
                "published": published,
                "example": round(example, 1),
                "example_error": round(example / published - 1, 4),
                "graphcore_program": program,
                "graphcore_program_error": round(program / published - 1, 4),
                "program_over_example": round(program / example - 1, 4),
                # The program's step against the example's, per term (shares of the
                # example's time a sample): why the two figures differ.
                "step_difference_by_term": step_difference(run, features, shipped),
                "program": run["path"],
            }
        )
    rank = {r["row"]: k for k, r in enumerate(records)}
    return sorted(out, key=lambda r: rank[r["row"]])  # the table's order, not the runs'


def summarise(records: list[dict], covered: dict, scaled: list[dict], missing: list[str]) -> dict:
    """The figures the issue's targets are stated in."""
    loo = [abs(r["loo_row_error"]) for r in records]
    family = [abs(r["loo_family_error"]) for r in records]
    return {
        "rows": len(records),
        "calibration_rows": sum(r["calibration"] for r in records),
        "loo_row_median_abs_error": round(statistics.median(loo), 4) if loo else None,
        "loo_row_share_within_10pct": round(sum(e <= 0.1 for e in loo) / len(loo), 4)
        if loo
        else None,
        "loo_family_median_abs_error": round(statistics.median(family), 4) if family else None,
        "coverage_80pct_band": covered["coverage"],
        "scale_out_median_abs_error": round(statistics.median(abs(s["error"]) for s in scaled), 4)
        if scaled
        else None,
        "rows_without_features": missing,
    }


def main(argv: list[str] | None = None) -> int:
    parser = arguments.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--features",
        default=str(calibration_set.FEATURES_FILE),
        help="rows' features (row_features.py)",
    )
    parser.add_argument(
        "--set", default=str(calibration_set.SET_FILE), help="the declared calibration set"
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="store the bands in hardware/calibration.json, where the reports read them",
    )
    args = parser.parse_args(argv)
    # The results file and the shipped bands are the declared set's: a run on another set or
    # features file (an experiment) prints its figures and changes neither.
    declared_run = (Path(args.features).resolve(), Path(args.set).resolve()) == (
        calibration_set.FEATURES_FILE.resolve(),
        calibration_set.SET_FILE.resolve(),
    )
    if args.write and not declared_run:
        parser.error(
            "--write stores the declared set's bands in hardware/calibration.json; leave out "
            "--set and --features to write them, or --write to try another set"
        )
    try:
        stored = json.loads(Path(args.features).read_text())
        declared = calibration_set.load(Path(args.set))
    except (OSError, ValueError, KeyError) as error:
        parser.error(f"cannot read the features or the set: {error}")
    started = time.perf_counter()
    values, records, band_rows = cross_validated_rows(stored, declared)
    covered = calibration.coverage(band_rows)
    scaled = scale_out_rows(records)
    missing = [k for k in calibration_set.all_rows() if k not in stored["rows"]]
    for record in records:
        record.update(covered["per_row"].get(record["row"], {}))
        print(json.dumps(record), flush=True)
    programs = graphcore_program_rows(records, stored)
    for line in [*scaled, *programs]:
        print(json.dumps(line), flush=True)
    summary = summarise(records, covered, scaled, missing)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps(summary), flush=True)
    bands = {name: b.to_json() for name, b in calibration.bands(band_rows).items()}
    if args.write:
        record = {
            "bands": bands,
            "band": calibration.BAND,
            "coverage": covered["coverage"],
            "coverage_by_class": covered["by_class"],
            "fitted_by": "python benchmarks/validate.py --write",
        }
        try:
            calibration.write_cross_validation(record)
        except OSError as error:  # one line; the file is unchanged
            print(f"validate.py: {error.strerror}", file=sys.stderr)
            return 1
    if not declared_run:
        print(
            "validate.py: another set or features file; benchmarks/results/validate.json "
            "is the declared set's and is left as it is",
            file=sys.stderr,
        )
        return 0
    write_results(
        "validate",
        {
            "summary": summary,
            "parameters": {k: float(f"{v:.6g}") for k, v in values.items()},
            "bands": bands,
            "coverage_by_class": covered["by_class"],
            "rows": records,
            "scale_out": scaled,
            "graphcore_programs": programs,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
