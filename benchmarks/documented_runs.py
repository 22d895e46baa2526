"""Runs the commands the documentation shows and records what each gave, for the pages.

A page that says what a command gives (a tutorial's test accuracy, a pipeline's bubble, a
sweep's efficiency) would otherwise carry a figure typed in by hand, which drifts the next
time the code changes. This script runs each such command as a user would (``poprun-emu``,
``poprun-emu-scaling`` or ``python``, from the repository root) and writes
``benchmarks/results/documented_runs.json``: for every run its name, the command, its exit
code and seconds, the program's own last printed line, and the figures read from what it
wrote (its JSON line, ``summary.json`` of ``--report-dir``, ``scaling.json`` of
``--out``). The pages render them with ``<!-- generated: run NAME -->`` and
``<!-- generated: runs NAME,NAME -->`` (``docs_build/runs.py``). The rows of runs not run
this time are kept, so one run can be refreshed alone.

Runs marked ``trains`` train a real program (minutes on two cores); the others only compile a
step and simulate it with the hardware model (``--offline-mode``, ``poprun-emu-scaling``).

Usage::

    python benchmarks/documented_runs.py                 # every run
    python benchmarks/documented_runs.py --runs NAME,... # only these
    python benchmarks/documented_runs.py --simulated     # only those that train nothing
    python benchmarks/documented_runs.py --list
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from documented_commands import RUNS, DocumentedRun, Outputs
from results_file import results_dir, write_results

ROOT = Path(__file__).resolve().parents[1]
NAME = "documented_runs"
LAST_LINE = 300  # characters of the last line kept (a JSON line can be long)
LAUNCHERS = {
    "poprun-emu": [sys.executable, "-m", "launch"],
    "poprun-emu-scaling": [sys.executable, "-m", "popdist_emu.scaling"],
    "python": [sys.executable],
}


def _last_line(text: str) -> str:
    lines = [line.split(">:", 1)[-1].strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_one(name: str, run: DocumentedRun, timeout: float) -> dict:
    """Runs ``run`` once from the repository root; returns its row of the results file."""
    with tempfile.TemporaryDirectory(prefix=f"documented-{name}-") as tmp:
        words = [w.replace("{out}", tmp) for w in run.words]
        command = [*LAUNCHERS[run.launcher], *words]
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                command,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as error:
            code, out, err = None, str(error.stdout or ""), f"timed out after {timeout:g} s"
        seconds = round(time.perf_counter() - start, 1)
        figures: dict = {}
        if code == 0:
            figures = run.figures(Outputs(out, err, Path(tmp)))
    return {
        "run": name,
        **run.labels,
        "command": " ".join([run.launcher, *(w.replace("{out}/", "") for w in run.words)]),
        "exit_code": code,
        "seconds": seconds,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "last_line": (_last_line(out) or _last_line(err))[:LAST_LINE],
        "figures": figures,
    }


def _write(rows: list[dict]) -> Path:
    """``rows`` into the results file beside the kept rows of the other runs, in the order
    of ``RUNS``."""
    path = results_dir() / f"{NAME}.json"
    kept: dict[str, dict] = {}
    if path.is_file():
        kept = {row["run"]: row for row in json.loads(path.read_text())["figures"]}
    kept |= {row["run"]: row for row in rows}
    order = list(RUNS)
    return write_results(NAME, sorted(kept.values(), key=lambda r: order.index(r["run"])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="", help="comma-separated names (default: all)")
    parser.add_argument("--simulated", action="store_true", help="only runs that train nothing")
    parser.add_argument("--list", action="store_true", help="print the runs and exit")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (1800)")
    args = parser.parse_args(argv)
    names = [n for n in args.runs.split(",") if n] or list(RUNS)
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        parser.error(f"--runs: unknown {unknown[0]!r}; choose from {','.join(RUNS)}")
    if args.simulated:
        names = [n for n in names if not RUNS[n].trains]
    if args.list:
        for name in names:
            print(f"{name}: {RUNS[name].launcher} {' '.join(RUNS[name].words)}")
        return 0
    rows = []
    for name in names:
        row = run_one(name, RUNS[name], args.timeout)
        print(json.dumps(row), flush=True)
        rows.append(row)
        path = _write([row])  # each run as it ends: an interrupted series keeps the others
    print(f"wrote {path}" if rows else "no run selected")
    return 0 if all(row["exit_code"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
