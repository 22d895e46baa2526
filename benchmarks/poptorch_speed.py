"""Seconds per optimiser step of PopTorch programs: under ``poprun-emu`` against plain PyTorch.

Two programs. ``examples/poptorch_tutorial.py`` (the PopTorch pipelining tutorial's
structure on the digits): both runs take the same global batch per step (micro-batch 1 x
gradient accumulation 8 x replicas) and the same data order. ``benchmarks/poptorch_cnn.py``
(a small CNN, three convolutions on 32x32 images, at batch 32: micro-batches of 32, 4
device iterations a call, against PyTorch's steps of 32). Each runs in plain PyTorch eager on
the CPU (``--reference``) and as the PopTorch program under ``poprun-emu --num-replicas N``
on one instance (functional: real numbers on the JAX core). The figure is the program's own
``seconds_per_step``: wall seconds from the end of its first call (start-up and compilation
are over by then) to the end of training, over the steps in between. The runs alternate,
``--repeats`` times; the median and the range of each are printed side by side with their
ratio, and the load average before each model's runs, since other work on the machine slows
every figure. The last line is one JSON object; the same figures, with the date, the machine,
the load average and the command, are written to ``benchmarks/results/poptorch_speed.json``
(``results_file.write_results``).

Needs the ``poptorch`` extra (torch and torchax).

Usage::

    python benchmarks/poptorch_speed.py [--models tutorial cnn] [--replicas 1]
        [--ipus-per-replica 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from results_file import write_results

ROOT = Path(__file__).resolve().parents[1]
# Each model's program and the words that make it plain PyTorch with N replicas' batch.
PROGRAMS = {
    "tutorial": (ROOT / "examples" / "poptorch_tutorial.py", lambda n: ["--reference", str(n)]),
    "cnn": (ROOT / "benchmarks" / "poptorch_cnn.py", lambda n: ["--reference"]),
}


def _per_step(command: list[str], **extra_env: str) -> float:
    """The program's steady-state wall seconds per step (from its JSON line)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.update(extra_env)
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{out.stderr[-2000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds_per_step"])


def _model(name: str, args: argparse.Namespace, launcher: str) -> dict[str, Any]:
    """One model's runs, alternating, and the table of their medians, ranges and ratios."""
    program, reference = PROGRAMS[name]
    emulated = [
        launcher, "--num-replicas", str(args.replicas), "--ipus-per-replica",
        str(args.ipus_per_replica), "--only-output-from-instance", "0", str(program),
    ]  # fmt: skip
    eager = [sys.executable, str(program), *reference(args.replicas)]
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {"pytorch_eager": [], "pytorch_eager_1_thread": [],
                                     "poprun_emu": []}  # fmt: skip
    for _ in range(args.repeats):
        times["pytorch_eager"].append(_per_step(eager))
        # poprun-emu pins one compute thread per instance; PyTorch with one thread too:
        times["pytorch_eager_1_thread"].append(_per_step(eager, OMP_NUM_THREADS="1"))
        times["poprun_emu"].append(_per_step(emulated))
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"{name}: load average before the runs: {load:.2f}")
    print(f"{'run':<24}{'ms per step (median)':>22}{'range':>22}")
    for run, values in times.items():
        spread = f"{min(values) * 1e3:.2f}-{max(values) * 1e3:.2f}"
        print(f"{run:<24}{medians[run] * 1e3:>22.2f}{spread:>22}")
    ratio = medians["poprun_emu"] / medians["pytorch_eager"]
    ratio_1 = medians["poprun_emu"] / medians["pytorch_eager_1_thread"]
    print(
        f"{name}: poprun-emu / PyTorch eager: {ratio:.2f}x; / PyTorch eager on one thread: "
        f"{ratio_1:.2f}x (goal: no slower, 1.00x or less)"
    )
    return {
        "runs": [
            {
                "model": name,
                "run": run,
                "median_ms": round(medians[run] * 1e3, 3),
                "min_ms": round(min(values) * 1e3, 3),
                "max_ms": round(max(values) * 1e3, 3),
                "repeats": len(values),
                "load_average_before": round(load, 2),
            }
            for run, values in times.items()
        ],
        "ratio": {
            "model": name,
            "poprun_emu_to_eager": round(ratio, 3),
            "poprun_emu_to_eager_1_thread": round(ratio_1, 3),
            "goal": 1.0,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(PROGRAMS), default=list(PROGRAMS))
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--ipus-per-replica", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    launcher = shutil.which("poprun-emu", path=str(Path(sys.executable).parent))
    if launcher is None:
        raise SystemExit("poprun-emu is not installed beside this Python: pip install -e .")
    figures = {name: _model(name, args, launcher) for name in args.models}
    result = {
        "replicas": args.replicas,
        "ipus_per_replica": args.ipus_per_replica,
        "global_batch": {"tutorial": 8 * args.replicas, "cnn": 32},
        "load_average_after": os.getloadavg()[0],
        "runs": [row for model in figures.values() for row in model["runs"]],
        "ratios": [model["ratio"] for model in figures.values()],
    }
    write_results("poptorch_speed", result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
