"""How long each fault takes to end a ``poprun-emu`` job: the table in the README.

For every case of tests/launch/fault_program.py (2 instances; instance 1 fails) this runs
the job ``--repeats`` times and measures the seconds from the fault (the wall-clock time
the victim records just before it) to the launcher's exit, and the launcher's exit code.
The SIGSTOP, early-exit and stuck (sleep, spin, loader) cases run with
``--collective-timeout 3``: they end when the timeout expires.
Prints one JSON line per run, then a Markdown table (median, min, max).

Usage::

    python benchmarks/faults.py [--repeats 3] [--cases before,during,...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import write_results

from contract import ENV_MPIEXEC

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "launch" / "fault_program.py"
DESCRIPTION = {
    "early": "sys.exit(0) before MPI_Init (peer waits in it), --collective-timeout 3",
    "before": "uncaught exception before the first collective",
    "during": "uncaught exception between collectives",
    "inside": "exception raised inside a collective's wait",
    "after": "uncaught exception after the last collective",
    "exit": "sys.exit(0) while the peer waits in a collective",
    "exit3": "sys.exit(3) while the peer waits in a collective",
    "extra": "peer calls one collective more (victim returned)",
    "kill": "SIGKILL",
    "stop": "SIGSTOP, --collective-timeout 3",
    "stopboot": "SIGSTOP of its bootstrap (the program runs on), --collective-timeout 3",
    "sleep": "sleeps in its program (peer waits in a collective), --collective-timeout 3",
    "spin": "spins in its program (peer waits in a collective), --collective-timeout 3",
    "loader": "waits on a data loader that never delivers, --collective-timeout 3",
}
CASES = tuple(DESCRIPTION)  # the cases of tests/launch/fault_program.py, in its order
STOP_TIMEOUT_S = 3


def _launcher() -> list[str]:
    script = shutil.which("poprun-emu")
    return [script] if script else [sys.executable, "-m", "launch"]


def run_case(case: str) -> dict:
    """One job with the fault ``case``: seconds from the fault to the launcher's exit."""
    with tempfile.TemporaryDirectory(prefix="faults-") as out:
        command = [*_launcher(), "--num-replicas", "2", "--num-instances", "2"]
        if case in ("stop", "early", "stopboot", "sleep", "spin", "loader"):
            command += ["--collective-timeout", str(STOP_TIMEOUT_S)]
        command += [str(PROGRAM), case, out]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
        ended = time.time()
        fault = float((Path(out) / "fault").read_text())
    said = [line for line in proc.stderr.splitlines() if line.startswith("poprun-emu: ")]
    first = said[0].removeprefix("poprun-emu: ") if said else ""
    return {
        "case": case,
        "code": proc.returncode,
        "seconds": round(ended - fault, 3),
        "said": first,  # the launcher's first line: does it name the victim, not its peer?
        "named": _first_instance_named(first) == 1,
    }


def _first_instance_named(line: str) -> int | None:
    """The instance a launcher line names first (``instance 1 ...``, ``instance(s) 1 never
    reached ...``, ``the bootstrap of instance 1 ...``): the one it blames."""
    match = re.search(r"\binstance(?:\(s\))? (\d+)\b", line)
    return int(match.group(1)) if match else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    results: dict[str, list[dict]] = {}
    for case in args.cases.split(","):
        for _ in range(args.repeats):
            run = run_case(case)
            print(json.dumps(run), flush=True)
            results.setdefault(case, []).append(run)
    mpi = os.environ.get(ENV_MPIEXEC) or "the mpich wheel's mpiexec"
    rows = []
    for case, runs in results.items():
        seconds = [r["seconds"] for r in runs]
        rows.append(
            {
                "fault (instance 1 of 2)": DESCRIPTION[case],
                "exit code": ",".join(map(str, sorted({r["code"] for r in runs}))),
                "seconds to end the job: median": round(statistics.median(seconds), 2),
                "min": round(min(seconds), 2),
                "max": round(max(seconds), 2),
                "instance 1 named": f"{sum(r['named'] for r in runs)} of {len(runs)}",
            }
        )
    flavour = "openmpi" if os.environ.get(ENV_MPIEXEC) else "mpich"
    write_results(f"faults-{flavour}", {"mpi": mpi, "faults": rows})
    print(f"\nMPI: {mpi}\n")
    print("| " + " | ".join(rows[0]) + " |" if rows else "")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(v) for v in row.values()) + " |")


if __name__ == "__main__":
    main()
