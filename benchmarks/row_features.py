"""Profiles each published row's program once and stores its step as data for cheap refits.

The expensive part of checking the hardware model against a row is compiling the row's
program (minutes for a BERT-Large pipeline on two cores); the fit of the parameters is
arithmetic. This command does the first once per row: it compiles the row's step as
``benchmarks/validate.py`` does (ResNet-50's profile in-process; every other row an offline
run of its example under ``poprun-emu``) and simulates it at the calibrated parameters and at
one probe per fitted term (``popdist_emu.calibration.probe_points``, answered in the same run
through a ``poprun-emu-scaling`` request whose points carry parameter values). The step's
coefficients in the parameters (``calibration.RowFeatures``: FLOPs over peak, ring steps,
compute sets, host calls, and the seconds no term touches) go to
``benchmarks/row_features.json`` with what names the row (model, system, layout, published
figure), so ``benchmarks/validate.py`` cross-validates and ``--calibrate-from`` refits in
seconds. The file is updated a row at a time, so an interrupted run keeps what it finished.

Run::

    python benchmarks/row_features.py                 # every row not yet in the file
    python benchmarks/row_features.py --rows C7 A3    # only these (again, if stored)
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import calibration_set
import validate
from published_rows import ExampleRow, Row

import hardware
from contract import ENV_SCALING_REQUEST, SweepPoint, write_atomically, write_request
from popdist_emu import arguments, calibration

ROOT = Path(__file__).resolve().parents[1]
FEATURES_FILE = calibration_set.FEATURES_FILE


def _base() -> dict[str, float]:
    return hardware.load_parameters().to_json()


def resnet_features(row: Row, profiles: dict) -> tuple[calibration.RowFeatures, float]:
    """A ResNet-50 row's features from its step profile (compiled once per micro-batch)."""
    if row.micro_batch not in profiles:
        sys.path.insert(0, str(ROOT / "examples"))
        import resnet50

        profiles[row.micro_batch] = resnet50.profile(row.micro_batch)
    points = calibration.probe_points(_base())
    instances = row.instances or row.replicas // 2
    published = calibration.PublishedRow(
        row.system,
        row.replicas,
        row.gradient_accumulation,
        instances,
        validate.hosts(row.replicas),
        row.published,
    )
    steps, samples = [], 0.0
    for values in points:
        parameters = hardware.ModelParameters(**values)
        sim = calibration.simulate_row(profiles[row.micro_batch], published, parameters)
        steps.append(sim.simulated_step_seconds)
        samples = sim.samples_per_step
    return calibration.features_from_probes(points, steps, samples), steps[0]


def probe_sweep(launch: str) -> tuple[list[dict[str, float]], list[SweepPoint]]:
    """The probe points (``calibration.probe_points`` at the shipped parameters) and the
    sweep that asks for each at the layout of a row's launch words."""
    words = launch.split()
    layout = {words[i].lstrip("-"): words[i + 1] for i in range(0, len(words), 2)}
    points = calibration.probe_points(_base())
    sweep = [
        SweepPoint(
            int(layout["num-replicas"]),
            int(layout["num-instances"]),
            int(layout["ipus-per-replica"]),
            layout["system"],
            parameters=tuple(values.items()),
        )
        for values in points
    ]
    return points, sweep


def features_from_answer(
    points: list[dict[str, float]], answer: Path, per_sample: float = 1.0
) -> calibration.RowFeatures:
    """A step's features from the answer to :func:`probe_sweep`'s request, counting
    ``per_sample`` of the published figure's units per simulated sample."""
    summaries = [r["summary"] for r in json.loads(answer.read_text())["points"]]
    steps = [s["simulated_step_seconds"] for s in summaries]
    samples = summaries[0]["samples_per_step"] * per_sample
    return calibration.features_from_probes(points, steps, samples)


def example_features(row: ExampleRow) -> tuple[calibration.RowFeatures, float]:
    """An example row's features from one offline run that answers the probes."""
    points, sweep = probe_sweep(row.launch)
    with tempfile.TemporaryDirectory() as folder:
        request, answer = os.path.join(folder, "request.json"), os.path.join(folder, "answer")
        write_request(request, sweep, answer)
        report = validate.run_example(row, {ENV_SCALING_REQUEST: request})
        # The published figure's units per sample: BERT's MLPerf rows count sequences, two a
        # packed sample (the example's --sequences-per-sample).
        features = features_from_answer(points, Path(answer), figure_per_sample(row))
    return features, float(report["simulated_step_seconds"])


def figure_per_sample(row: ExampleRow) -> float:
    """The row's figure per sample the example simulates: its ``--sequences-per-sample``
    (BERT's packing factor), else 1."""
    words = row.words.split()
    flag = "--sequences-per-sample"
    return float(words[words.index(flag) + 1]) if flag in words else 1.0


def describe(row: Row | ExampleRow) -> dict:
    """What names a row in the features file: its model, system, layout and figure."""
    if isinstance(row, Row):
        return {
            "model": "ResNet-50",
            "system": row.system,
            "replicas": row.replicas,
            "ipus_per_replica": 1,
            "micro_batch": row.micro_batch,
            "gradient_accumulation": row.gradient_accumulation,
            "published": row.published,
            "source": row.source,
        }
    launch = row.launch.split()
    return {
        "model": row.model,
        "system": launch[1],
        "replicas": int(launch[3]),
        "ipus_per_replica": int(launch[7]),
        "micro_batch": row.value("--micro-batch-size"),
        "gradient_accumulation": row.value("--gradient-accumulation"),
        "published": row.published,
        "source": row.source,
    }


def load_features(path: Path = FEATURES_FILE) -> dict:
    """The stored file (empty rows where none is)."""
    return json.loads(path.read_text()) if path.exists() else {"rows": {}}


def main(argv: list[str] | None = None) -> int:
    parser = arguments.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", metavar="KEY", help="only these rows, again")
    args = parser.parse_args(argv)
    rows = calibration_set.all_rows()
    if args.rows:
        unknown = [key for key in args.rows if key not in rows]
        if unknown:
            parser.error(f"--rows {unknown[0]!r} names no row; the rows are {', '.join(rows)}")
    stored = load_features()
    todo = args.rows or [key for key in rows if key not in stored["rows"]]
    profiles: dict = {}
    for key in todo:
        row = rows[key]
        started = time.perf_counter()
        if isinstance(row, Row):
            features, model_step = resnet_features(row, profiles)
        else:
            features, model_step = example_features(row)
        record = describe(row) | features.to_json()
        record["base_step_seconds"] = model_step
        record["figure_per_sample"] = 1.0 if isinstance(row, Row) else figure_per_sample(row)
        record["profile_seconds"] = round(time.perf_counter() - started, 1)
        with open(FEATURES_FILE.with_suffix(".lock"), "w") as lock:  # runs side by side
            fcntl.flock(lock, fcntl.LOCK_EX)
            stored = load_features()  # another run may have added rows meanwhile
            stored["base_parameters"] = _base()
            stored["rows"][key] = record
            write_atomically(FEATURES_FILE, json.dumps(stored, indent=1) + "\n")
        print(json.dumps({"row": key, **record}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
