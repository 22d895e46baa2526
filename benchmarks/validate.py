"""Checks the hardware model against published throughput it was not fitted on.

Each row is a configuration Graphcore ran and published (``benchmarks/published_rows.md``
lists them with their sources and how MLPerf throughputs are derived from the logs;
``published_rows.py`` and ``bert_rows.py`` hold them as data). The row's step is compiled
from shapes (never run) by the example that models it, simulated on the row's system with
the calibrated parameters of ``hardware/calibration.json`` unchanged, and its prediction set
beside the published figure. The rows the parameters were fitted on
are printed apart, labelled as fitted, and left out of the median: the four MLPerf Training
v1.1 ResNet-50 rows (``benchmarks/calibrate.py``) and, with ``--bert``, the BERT family's
four single-Pod Mk2 rows (``benchmarks/calibrate_bert.py``).

Without flags the rows are ResNet-50's, the family ``examples/resnet50.py`` models: MLPerf
Training v1.0 on the Mk2 IPU-POD16 and POD64 (SDK 2.1, an older software stack than the
calibration's SDK 2.3), MLPerf Training v2.0 on Bow-POD16 to Bow-POD256 (SDK 2.5.1, the Bow IPU
at 1.85 GHz: an IPU the calibration never saw), and Graphcore's Bow launch figures at the
MLPerf configurations (v1.0's on the Pod16 and Pod64, v2.0's on the Pod256). With ``--bert``,
BERT-Large rows too, each an offline run of ``examples/bert.py`` under ``poprun-emu`` as
Graphcore's configuration file for the row sets it (its placement, tied decoder, vocabulary,
micro-batch, memory proportions, LAMB with RTS): MLPerf Training v1.0 and v1.1 on the Mk2
IPU-POD16 and POD64 are the family's calibration (v1.1 against its training-only throughput:
the references' figures include evaluation); v1.1 on the POD128 and v2.0 on Bow-POD16 to
Bow-POD256 (an IPU and a software release the BERT fit never saw; PopART, and PaddlePaddle on
the Pod16 and Pod64 with the same configurations) are the checks, with
Graphcore's performance-results rows of BERT on unpacked sequences: three of its TensorFlow 2
BERT on a Bow Pod16 (BERT-Large at 128 tokens, BERT-Base at 128 and 384), seven of its PopART
BERT (BERT-Large at 128 and 384 tokens on a Bow Pod16 and Pod64, BERT-Base at 128 and 512,
BERT-Large's SQuAD fine-tuning), two of its PopTorch BERT (BERT-Base at 128, SQuAD fine-tuning)
and three of its TensorFlow 1 BERT (BERT-Large at 128 tokens on a Bow Pod16 and Pod64, at 384
on a Pod16): other sequence lengths, micro-batches, a smaller model, another task and four
frameworks. With ``--vit``, the ViT-B/16 row, with ``--resnext`` the ResNeXt-101 row
(``examples/resnext_training.py``) and with ``--efficientnet`` the three G16-EfficientNet-B4
rows (``examples/efficientnet_training.py``). Every row runs with the one calibrated parameter
set, each term weighed by what the row's program shows, never by its model's name (matmul
FLOPs at the BERT fit's matmul efficiency, a replica of several IPUs paying its cost per host
call: ``docs/hardware-model.md``, "Structure, not names"). The other families wait for their
examples.

Layouts: one IPU per replica, ``replicas / 2`` instances (PopRun's MLPerf ResNet-50 runs;
16 for the v1.0 Pod64 run, as its logs give),
and the calibration rows' hosts per Pod size (1 for a Pod16, 4 for a Pod64, then 4 per
Pod64); the optimiser of ``examples/resnet50.py`` for every row (Graphcore's v1.0 runs
used SGD with momentum, the v2.0 runs LARS).

Prints one JSON line per row, then a Markdown table with the median and the worst absolute
error, and a last JSON line with those.

Run::

    python benchmarks/validate.py [--bert] [--vit] [--resnext] [--efficientnet]
    python benchmarks/validate.py --rows A9 C8   # only these rows, whatever the flags

References:
    mlcommons/training_results_v1.0 and v2.0, Graphcore ResNet-50 result logs (throughput =
    1,281,167 ImageNet images / median epoch time); Graphcore, "Performance Results"
    (graphcore.ai/performance-results, Bow Pod launch figures).
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

from bert_rows import (
    BERT_CALIBRATION_ROWS,
    BERT_POPART_ROWS,
    BERT_POPTORCH_ROWS,
    BERT_ROWS,
    BERT_TF1_ROWS,
    BERT_TF2_ROWS,
)
from published_rows import (
    EFFICIENTNET_ROWS,
    RESNEXT_ROWS,
    ROWS,
    VIT_ROWS,
    ExampleRow,
    Row,
)
from results_file import write_results

import hardware
from popdist_emu import arguments, calibration

ROOT = Path(__file__).resolve().parents[1]


def _hosts(replicas: int) -> int:
    return 1 if replicas <= 16 else replicas // 16


# The example rows by the flag that adds them (--bert, --vit, --resnext, --efficientnet).
FAMILIES = {
    "bert": BERT_CALIBRATION_ROWS
    + BERT_ROWS
    + BERT_TF2_ROWS
    + BERT_POPART_ROWS
    + BERT_POPTORCH_ROWS
    + BERT_TF1_ROWS,
    "vit": VIT_ROWS,
    "resnext": RESNEXT_ROWS,
    "efficientnet": EFFICIENTNET_ROWS,
}
EXAMPLE_ROWS = tuple(row for rows in FAMILIES.values() for row in rows)


def select_rows(keys: list[str] | None, families: list[str]) -> tuple[tuple, tuple]:
    """The ResNet-50 rows and example rows to run: every ResNet-50 row and the ``families``'
    example rows, or, with ``keys``, exactly the rows of those keys (a calibration key such
    as ``v1.1`` names all its rows).

    Raises:
        ValueError: a key that names no row, with the keys there are.
    """
    if keys is None:
        return ROWS, tuple(row for name in families for row in FAMILIES[name])
    known = [row.key for row in ROWS + EXAMPLE_ROWS]
    for key in keys:
        if key not in known:
            raise ValueError(
                f"--rows {key!r} names no row; the rows are {', '.join(dict.fromkeys(known))}"
            )
    return (
        tuple(row for row in ROWS if row.key in keys),
        tuple(row for row in EXAMPLE_ROWS if row.key in keys),
    )


def run_example(row: ExampleRow) -> dict:
    """The final JSON line of an offline run of the row's example under ``poprun-emu``."""
    launch, words = row.launch, row.words
    poprun = shutil.which("poprun-emu", path=str(Path(sys.executable).parent)) or "poprun-emu"
    command = [poprun, "--offline-mode", "yes", "--only-output-from-instance", "0"]
    command += [*launch.split(), str(ROOT / "examples" / row.example)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(
        command + words.split(), capture_output=True, text=True, env=env, timeout=1800
    )
    if out.returncode != 0:
        raise SystemExit(f"validate.py: {' '.join(command)} failed:\n{out.stderr[-2000:]}")
    lines = [line.split(">:", 1)[-1] for line in out.stdout.splitlines()]
    return json.loads(next(line for line in reversed(lines) if line.startswith("{")))


def predict_example(row: ExampleRow) -> float:
    """Simulated throughput of an offline run of the row's example under ``poprun-emu``."""
    return float(run_example(row)[row.figure])


def predict(profile: hardware.StepProfile, row: Row) -> float:
    """Simulated images per second of ``row`` with the calibrated parameters, as
    ``benchmarks/calibrate.py`` predicts its own rows."""
    instances = row.instances or row.replicas // 2
    layout = (row.system, row.replicas, row.gradient_accumulation, instances)
    published = calibration.PublishedRow(*layout, _hosts(row.replicas), row.published)
    return calibration.predict_row(profile, published, hardware.load_parameters())


def _table(results: list[dict]) -> str:
    header = "| row | system | replicas | mb | GA | published per s | predicted per s | error "
    lines = [header + "| source |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['row']} | {r['system']} | {r['replicas']} | {r['micro_batch']} | "
            f"{r['gradient_accumulation']} | {r['published']:,.0f} | {r['predicted']:,.0f} | "
            f"{r['error']:+.1%} | {r['source']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = arguments.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bert", action="store_true", help="BERT rows too (minutes)")
    parser.add_argument("--vit", action="store_true", help="ViT-B/16 rows too (a minute)")
    parser.add_argument("--resnext", action="store_true", help="ResNeXt-101 rows too (30 s)")
    parser.add_argument(
        "--efficientnet", action="store_true", help="EfficientNet-B4 rows too (4 minutes)"
    )
    parser.add_argument(
        "--rows",
        nargs="+",
        metavar="KEY",
        help="only these rows, by their key in the table (e.g. A9 C8), whatever the flags",
    )
    args = parser.parse_args(argv)
    families = [name for name in FAMILIES if getattr(args, name)]
    try:
        resnet_rows, examples = select_rows(args.rows, families)
    except ValueError as error:
        parser.error(str(error))

    profiles: dict[int, hardware.StepProfile] = {}
    started = time.perf_counter()
    results = []
    if resnet_rows:  # its profile compiles ResNet-50's step: seconds
        sys.path.insert(0, str(ROOT / "examples"))
        import resnet50
    for row in resnet_rows:
        if row.micro_batch not in profiles:
            profiles[row.micro_batch] = resnet50.profile(row.micro_batch)
        predicted = predict(profiles[row.micro_batch], row)
        result = {
            "row": row.key,
            "system": row.system,
            "replicas": row.replicas,
            "micro_batch": row.micro_batch,
            "gradient_accumulation": row.gradient_accumulation,
            "published": row.published,
            "predicted": round(predicted, 1),
            "error": round(predicted / row.published - 1.0, 4),
            "fitted": row.fitted,
            "source": row.source,
        }
        results.append(result)
        print(json.dumps(result), flush=True)
    simulated: dict[tuple[str, str], float] = {}
    for row in examples:
        if (row.launch, row.words) not in simulated:
            simulated[row.launch, row.words] = predict_example(row)
        predicted = simulated[row.launch, row.words]
        launch = row.launch.split()
        result = {
            "row": row.key,
            "system": f"{launch[1]} ({row.model})",
            "replicas": int(launch[3]),
            "micro_batch": row.value("--micro-batch-size"),
            "gradient_accumulation": row.value("--gradient-accumulation"),
            "published": row.published,
            "predicted": round(predicted, 1),
            "error": round(predicted / row.published - 1.0, 4),
            "fitted": row in BERT_CALIBRATION_ROWS,
            "source": row.source,
        }
        results.append(result)
        print(json.dumps(result), flush=True)
    checked = [r for r in results if not r["fitted"]]
    print("\nRows no fit used:\n" + _table(checked))
    print("\nThe calibration rows (fitted):\n" + _table([r for r in results if r["fitted"]]))
    summary: dict = {"rows": len(checked)}
    if checked:
        errors = [abs(r["error"]) for r in checked]
        summary["median_abs_error"] = round(statistics.median(errors), 4)
        summary["worst_abs_error"] = round(max(errors), 4)
        summary["worst_row"] = max(checked, key=lambda r: abs(r["error"]))["row"]
        median, worst = summary["median_abs_error"], summary["worst_abs_error"]
        print(f"\nmedian |error| {median:.1%}, worst {worst:.1%} (row {summary['worst_row']})")
    summary["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary), flush=True)
    write_results("validate", {"summary": summary, "rows": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
