"""Does the band of a host-bound prediction hold when the same offline run is repeated?

A host-bound offline run predicts a throughput from the host's CPU per sample, measured on
this machine as the run goes; repeating the run measures it again, on a machine whose load
moves between runs. The band the report prints carries the measured spread of that CPU
time at the band's coverage (``hardware.host_share``, ``hardware.host_half_width``). This
runs ``poprun-emu --offline-mode`` on one host-bound PopTorch program (a loader that does
real work in the main thread between calls) ``--repeats`` times, reads each run's
``summary.json`` and reports, for every run, its prediction, its band and how many of the
other runs' predictions its band holds (``agree``: every band holds every prediction, the
issue's test). The model's part of the band is the same in every run, so the stricter
figure is the host's own: the largest deviation of a prediction from the runs' median,
beside the median host part of the band (``largest_deviation`` and
``median_host_in_band``). With ``--busy N``, every second run has N busy processes beside
it (a machine whose load changes between runs, as a shared one does). The last line is one
JSON object; the figures, with the date, the machine, the load average and the command, go
to ``benchmarks/results/host_bound_repeats.json``.

Usage::

    python benchmarks/host_bound_repeats.py [--repeats 5] [--busy 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from poprun_command import poprun_command
from results_file import write_results

# A PopTorch program whose host work per sample (an augmentation loop in the dataset, read
# in the main thread) outlasts the simulated IPU step: the throughput is the host's.
PROGRAM = """\
import poptorch
import torch


class Augmented(torch.utils.data.Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        x = torch.full((64,), float(i % 7))
        for _ in range(40):
            x = torch.tanh(x * 1.01 + 0.1)
        return x, i % 10


class Loss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 10)

    def forward(self, x, y):
        out = self.linear(x)
        return out, torch.nn.functional.cross_entropy(out, y)


opts = poptorch.Options()
opts.deviceIterations(4)
loader = poptorch.DataLoader(opts, Augmented(), batch_size=8)
model = poptorch.trainingModel(Loss(), opts, torch.optim.SGD(Loss().parameters(), lr=0.1))
for x, y in loader:
    model(x, y)
"""
LAYOUT = ("--num-replicas", "16", "--num-instances", "2")


def run_once(folder: Path, index: int, busy: int = 0) -> dict[str, Any]:
    """One offline run, beside ``busy`` busy processes: its prediction, band, measured host
    spread and whether host-bound."""
    program = folder / "host_bound.py"
    report = folder / f"report-{index}"
    command = [
        *poprun_command(), "--offline-mode", *LAYOUT, "--report-dir", str(report), str(program),
    ]  # fmt: skip
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=900)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{out.stderr[-2000:]}")
    summary = json.loads((report / "summary.json").read_text())
    low, high = summary["uncertainty"]["samples_per_second"]
    return {
        "run": index + 1,
        "samples_per_second": summary["samples_per_second"],
        "band_low": low,
        "band_high": high,
        "band_relative": summary["uncertainty"]["relative"],
        "host_relative": summary["uncertainty"]["host_relative"],
        "host_in_band": summary["uncertainty"]["host_in_band"],
        "host_spread_measured": summary["host_cpu_relative_spread"],
        "host_bound": summary["host_bound"],
        "busy_processes": busy,
    }


def agreement(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``runs`` with, for each, how many of the other runs' predictions its band holds."""
    rows = []
    for run in runs:
        others = [r["samples_per_second"] for r in runs if r is not run]
        held = sum(run["band_low"] <= value <= run["band_high"] for value in others)
        rows.append({**run, "holds_others": f"{held} of {len(others)}"})
    return rows


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The spread of the predictions against the bands: the figures and the verdict."""
    values = [r["samples_per_second"] for r in rows]
    median = statistics.median(values)
    return {
        "repeats": len(rows),
        "median_samples_per_second": median,
        "predictions_spread": (max(values) - min(values)) / median,
        "largest_deviation": max(abs(v / median - 1) for v in values),
        "median_host_in_band": statistics.median(r["host_in_band"] for r in rows),
        "narrowest_band_relative": min(r["band_relative"] for r in rows),
        "all_host_bound": all(r["host_bound"] for r in rows),
        "agree": all(
            r["band_low"] <= o["samples_per_second"] <= r["band_high"]
            for r in rows
            for o in rows
            if o is not r
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="offline runs (5)")
    parser.add_argument(
        "--busy", type=int, default=0, help="busy processes beside every second run (0)"
    )
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error(f"--repeats {args.repeats}: pass 2 or more; one run has nothing to agree with")
    if args.busy < 0:
        parser.error(f"--busy {args.busy}: pass 0 or more busy processes")
    with tempfile.TemporaryDirectory(prefix="host-bound-") as tmp:
        folder = Path(tmp)
        (folder / "host_bound.py").write_text(PROGRAM)
        rows = agreement([run_once(folder, i, args.busy * (i % 2)) for i in range(args.repeats)])
    verdict = summarise(rows)
    print(f"{'run':>4}{'busy':>6}{'samples/s':>12}{'band':>22}{'host spread':>13}{'holds':>10}")
    for r in rows:
        band = f"{r['band_low']:,.0f}-{r['band_high']:,.0f}"
        print(
            f"{r['run']:>4}{r['busy_processes']:>6}{r['samples_per_second']:>12,.0f}{band:>22}"
            f"{100 * r['host_spread_measured']:>12.1f}%{r['holds_others']:>10}"
        )
    print(
        f"predictions spread {100 * verdict['predictions_spread']:.1f} % of their median; "
        f"largest deviation from their median {100 * verdict['largest_deviation']:.1f} % "
        f"against the host's part +/-{100 * verdict['median_host_in_band']:.1f} %; "
        f"narrowest band +/-{100 * verdict['narrowest_band_relative']:.1f} %; "
        f"every band holds every prediction: {verdict['agree']}"
    )
    figures = {**verdict, "layout": " ".join(LAYOUT), "runs": rows}
    write_results("host_bound_repeats", figures)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
