"""The commands the documentation shows, and how each one's figures are read.

``benchmarks/documented_runs.py`` runs them and writes their figures for the pages. A
command's words are those a user types after the launcher, with ``{out}`` standing for a
temporary folder the run may write its reports to; its figures come from what the program
wrote, never from parsing prose: the program's own final JSON line, ``summary.json`` of
``--report-dir {out}/r`` or ``scaling.json`` of ``--out {out}/s``. The BERT-Large rows take
their launch and words from ``benchmarks/bert_rows.py``, the configurations the validation
predicts, so the page's table and the validation table run the same command.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import calibration_set
from published_rows import ExampleRow

MIB = 2**20


class Outputs(NamedTuple):
    """What a run left: its stdout and stderr and its temporary folder (``{out}``)."""

    stdout: str
    stderr: str
    folder: Path


class DocumentedRun(NamedTuple):
    """One command a page shows."""

    launcher: str  # poprun-emu, poprun-emu-scaling or python
    words: tuple[str, ...]  # after the launcher; {out} is the run's temporary folder
    figures: Callable[[Outputs], dict[str, Any]]
    trains: bool = False  # trains a real program (minutes), not only simulates a step
    labels: dict[str, Any] = {}  # noqa: RUF012 (never mutated) what names the run in a table


def program_line(outputs: Outputs) -> dict[str, Any]:
    """The figures of a training program's last JSON line (``examples/poptorch_tutorial.py``,
    ``examples/train.py``): its steps, first and last loss and test accuracy."""
    for line in reversed(outputs.stdout.splitlines()):
        text = line[line.find("{") :] if "{" in line else ""
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            break
    else:
        return {}
    figures: dict[str, Any] = {}
    losses = record.get("losses") or []
    if losses:  # examples/poptorch_tutorial.py: every step's loss
        record |= {"steps": len(losses), "first_loss": losses[0], "final_loss": losses[-1]}
    if record.get("first_loss") is not None:  # examples/train.py: the first and last
        if record.get("steps") is not None:  # the image examples do not print theirs
            figures["steps"] = record["steps"]
        figures["first_loss"] = round(record["first_loss"], 4)
        figures["last_loss"] = round(record["final_loss"], 4)
    accuracy = record.get("accuracy", record.get("test_accuracy"))
    if accuracy is not None:
        figures["test_accuracy_percent"] = round(100 * accuracy, 1)
    return figures


def summary(outputs: Outputs) -> dict[str, Any]:
    """The simulated step of ``--report-dir {out}/r``: its time and throughput, and for a
    replica over several IPUs the pipeline's bubble and balance and each IPU's memory."""
    doc = json.loads((outputs.folder / "r" / "summary.json").read_text())
    figures: dict[str, Any] = {
        "step_ms": round(1e3 * doc["simulated_step_seconds"], 2),
        "samples_per_s": round(doc["samples_per_second"]),
    }
    pipeline = doc.get("pipeline")
    if pipeline:
        figures["bubble_percent"] = round(100 * pipeline["bubble_fraction"], 1)
        figures["balance"] = round(pipeline["balance"], 2)
        memory = [round(ipu["memory_total"] / MIB, 1) for ipu in pipeline["ipus"]]
        figures["memory_per_ipu_mib"] = ", ".join(str(m) for m in memory)
    else:
        figures["memory_per_ipu_mib"] = round(doc["memory_per_ipu_total"] / MIB, 1)
    figures["memory_capacity_mib"] = round(doc["memory_capacity_per_ipu"] / MIB, 1)
    return figures


def sweep(outputs: Outputs) -> dict[str, Any]:
    """A sweep's points from ``--out {out}/s`` (with the published figure at the same replica
    count, where ``--published`` gave one) and the sentences it printed on what limits the
    scaling, as it printed them."""
    doc = json.loads((outputs.folder / "s" / "scaling.json").read_text())
    series = doc["series"][0]
    published = {int(p["replicas"]): float(p["throughput"]) for p in doc["published"]}
    points = []
    for row in series["rows"]:
        point = {
            "replicas": row["replicas"],
            "GA": row["gradient_accumulation"],
            "global batch": row["global_batch"],
            "step (ms)": round(1e3 * row["simulated_step_seconds"], 2),
            "predicted samples/s": round(row["samples_per_second"]),
        }
        if row["replicas"] in published:
            point["published samples/s"] = round(published[row["replicas"]])
        point |= {
            "speed-up": round(row["speedup"], 2),
            "efficiency (%)": round(100 * row["efficiency"], 1),
            "Karp-Flatt e": None if row["karp_flatt"] is None else round(row["karp_flatt"], 3),
            "memory/IPU (MiB)": round(row["memory_per_ipu_total"] / MIB),
        }
        points.append(point)
    return {"points": points, "analysis": _first_series_sentences(outputs.stdout)}


def _first_series_sentences(stdout: str) -> list[str]:
    """The sentences ``poprun-emu-scaling`` printed under its first series' label (indented
    by two spaces, after ``[poprun-emu-scaling] LABEL:``)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("[") and line.endswith(":"))
    sentences = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        sentences.append(line.strip())
    return sentences


def planner_lines(outputs: Outputs) -> dict[str, Any]:
    """The lines the run printed for each IPU's memory as the convolution planner sees it."""
    lines = [line.strip() for line in outputs.stdout.splitlines()]
    return {"printed": [line for line in lines if line.startswith("IPU") and "always-live" in line]}


def printed_table(outputs: Outputs) -> dict[str, Any]:
    """The table ``examples/resnext.py --sweep`` printed, its header to its ``best:`` line."""
    lines = [line.rstrip() for line in outputs.stdout.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("bs \\ amp"))
    end = next(i for i, line in enumerate(lines) if line.startswith("best:"))
    return {"printed": lines[start : end + 1]}


def _row_run(key: str, label: str, unit: str = "seq/s") -> DocumentedRun:
    """The offline run of published row ``key`` (``benchmarks/bert_rows.py``'s words, or
    the calibration set's for the vision rows), whose published figure is in ``unit``."""
    row = calibration_set.all_rows()[key]
    assert isinstance(row, ExampleRow), key
    words = (
        "--offline-mode",
        "yes",
        *row.launch.split(),
        "--report-dir",
        "{out}/r",
        f"examples/{row.example}",
        *shlex.split(row.words),
    )
    launch = row.launch.split()
    replicas = launch[launch.index("--num-replicas") + 1]
    ipus = launch[launch.index("--ipus-per-replica") + 1]
    labels = {
        "system": label,
        "IPUs/replica x replicas": f"{ipus} x {replicas}",
        "micro-batch": row.value("--micro-batch-size"),
        "GA": row.value("--gradient-accumulation"),
        f"published {unit}": f"{row.published:,.0f}",
    }
    return DocumentedRun("poprun-emu", words, summary, labels=labels)


def _words(text: str) -> tuple[str, ...]:
    return tuple(shlex.split(text))


TUTORIAL = "examples/poptorch_tutorial.py"
TRAIN = "examples/train.py --gradient-accumulation 8"
RUNS: dict[str, DocumentedRun] = {
    # docs/poptorch.md: the tutorial program, trained.
    "poptorch-tutorial-4-ipus": DocumentedRun(
        "poprun-emu",
        _words(f"--num-replicas 1 --ipus-per-replica 4 {TUTORIAL}"),
        program_line,
        trains=True,
    ),
    "poptorch-tutorial-2-instances": DocumentedRun(
        "poprun-emu",
        _words(f"--num-replicas 4 --num-instances 2 {TUTORIAL}"),
        program_line,
        trains=True,
    ),
    # docs/model-parallelism.md: the tutorial's network as four blocks, trained, then its
    # simulated step pipelined and sharded.
    "train-pipelined": DocumentedRun(
        "poprun-emu",
        _words(f"--num-replicas 2 --num-instances 2 --ipus-per-replica 4 {TRAIN}"),
        program_line,
        trains=True,
    ),
    **{
        f"train-offline-{strategy}": DocumentedRun(
            "poprun-emu",
            _words(
                "--offline-mode yes --num-replicas 2 --num-instances 2 --ipus-per-replica 4 "
                f"--report-dir {{out}}/r {TRAIN} --strategy {strategy}"
            ),
            summary,
            labels={"strategy": strategy},
        )
        for strategy in ("pipelined", "sharded")
    },
    # docs/model-parallelism.md: BERT-Large against MLPerf Training v1.1.
    "bert-large-v1.1-pod16": _row_run("v1.1 POD16", "POD16 (fitted)"),
    "bert-large-v1.1-pod64": _row_run("v1.1 POD64", "POD64 (fitted)"),
    "bert-large-v1.1-pod128": _row_run("v1.1 POD128", "POD128"),
    # docs/model-parallelism.md: ViT-B/16, ResNeXt-101 and EfficientNet-B4; each tiny model
    # learns the digits for real, and Graphcore's configuration runs offline as its
    # validation row does.
    **{
        f"{name}-tiny": DocumentedRun(
            "poprun-emu",
            _words(f"--num-replicas 2 --ipus-per-replica 2 examples/{program}"),
            program_line,
            trains=True,
        )
        for name, program in (
            ("vit", "vit.py --model tiny"),
            ("resnext", "resnext_training.py"),
            ("efficientnet", "efficientnet_training.py"),
        )
    },
    "vit-base-pod64": _row_run("C8", "Bow Pod64", "img/s"),
    "resnext-101-pod16": _row_run("C7", "Bow-POD16", "img/s"),
    "efficientnet-b4-pod16": _row_run("C4", "Bow-POD16", "img/s"),
    # docs/model-parallelism.md: BERT-Base over four IPUs, each with its memory proportion.
    "bert-base-planner": DocumentedRun(
        "poprun-emu",
        _words(
            "--offline-mode --num-replicas 1 --ipus-per-replica 4 examples/bert.py --model base "
            "--sequence-length 128 --micro-batch-size 8 --recompute --offload-optimiser "
            "--available-memory-proportion 0.15 0.18 0.2 0.25"
        ),
        planner_lines,
    ),
    # docs/model-parallelism.md: the convolution planner's sweep of ResNeXt-101 (shapes only).
    "resnext-planner-sweep": DocumentedRun(
        "python",
        _words(
            "examples/resnext.py --sweep --micro-batch-sizes 8 16 24 28 32 36 40 "
            "--proportions 0.1 0.2 0.35 0.6 0.8"
        ),
        printed_table,
    ),
    # docs/scaling.md: MLPerf v1.1's ResNet-50 runs as they were run.
    "resnet50-mlperf-v1.1-sweep": DocumentedRun(
        "poprun-emu-scaling",
        _words(
            "--num-replicas 16,64,128,256 --instances-per-replica 0.5 --strong "
            "--global-batch 3200,3840,5120,10240 --published examples/mlperf_v1.1_resnet50.csv "
            "--out {out}/s examples/resnet50.py --micro-batch-size 20"
        ),
        sweep,
    ),
}
