"""Where each benchmark's latest figures live: ``benchmarks/results/<name>.json``.

A figure typed into a page by hand drifts from what the code gives the next time anything
changes, and says nothing of the machine, the load or the command it came from. So each
benchmark that prints figures also writes them here, with that provenance; the documentation
site renders these files (``docs_build``), and a changed file is committed with the change
that moved it.

``BENCHMARK_RESULTS_DIR`` names another folder: the test suite sets it, so a test that runs
a benchmark never rewrites the committed figures.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from contract import write_atomically

RESULTS = Path(__file__).resolve().parent / "results"
RESULTS_DIR_VARIABLE = "BENCHMARK_RESULTS_DIR"


def results_dir() -> Path:
    """The folder results go to: ``$BENCHMARK_RESULTS_DIR``, else ``benchmarks/results``."""
    return Path(os.environ.get(RESULTS_DIR_VARIABLE) or RESULTS)


def machine() -> str:
    """The machine in a few words: CPU model and count, OS and Python, enough to tell two
    machines' figures apart without naming the host."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    python = platform.python_version()
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()}, Python {python}"


def write_results(name: str, figures: object, argv: Sequence[str] | None = None) -> Path:
    """Writes ``<results dir>/<name>.json``: the date, machine, load average, command and
    ``figures`` (JSON-ready: a dict of figures or a list of rows), through a temporary name
    renamed into place, so an interrupted run keeps the previous file.

    Args:
        name: the benchmark's name, the script's stem.
        figures: what the run measured, as the script prints it.
        argv: the command's words (default ``sys.argv``, shown as ``python <script> ...``).

    Returns:
        The file written.
    """
    import json

    words = list(sys.argv if argv is None else argv)
    if words and words[0].endswith(".py"):
        words[0] = f"benchmarks/{Path(words[0]).name}"
        words.insert(0, "python")
    record = {
        "benchmark": name,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "command": shlex.join(words),
        "figures": figures,
    }
    path = results_dir() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(record, indent=1) + "\n")
    return path
