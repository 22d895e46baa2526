"""The documented commands' figures, from ``benchmarks/results/documented_runs.json``.

``benchmarks/documented_runs.py`` runs each command a page shows (a tutorial trained, a
pipeline simulated, a scaling sweep) and records its command, exit code, seconds, last
printed line and figures. A page asks for them with

- ``<!-- generated: run NAME -->``: one run, its command and provenance, its figures as a
  table, a sweep's points as a table and what it printed on its scaling as a list;
- ``<!-- generated: runs NAME,NAME -->``: several runs as one table, a row each (what names
  the run, then its figures), with each run's command below.

A run not yet recorded renders as a line naming the command that records it, as
``docs_build.results`` does for a benchmark not yet run; an unknown name fails the build.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

from docs_build.results import RESULTS, _rows_table, pairs_table

NAME = "documented_runs"
HEADINGS = {  # a figure's key in the file -> its heading on the page
    "steps": "steps",
    "first_loss": "first loss",
    "last_loss": "last loss",
    "test_accuracy_percent": "test accuracy (%)",
    "step_ms": "simulated step (ms)",
    "samples_per_s": "simulated samples/s",
    "bubble_percent": "bubble (%)",
    "balance": "balance",
    "memory_per_ipu_mib": "memory per IPU (MiB)",
    "memory_capacity_mib": "of (MiB)",
}
NOT_FIGURES = ("run", "command", "exit_code", "seconds", "date", "last_line", "figures")


class UnknownRunError(ValueError):
    """A page names a run ``benchmarks/documented_commands.py`` does not define."""


def _known_runs() -> list[str]:
    """The runs ``benchmarks/documented_commands.py`` defines (a script's module, imported
    from its folder as the benchmarks import each other)."""
    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    return list(importlib.import_module("documented_commands").RUNS)


def _rows(folder: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    path = folder / f"{NAME}.json"
    if not path.is_file():
        return {}, {}
    record = json.loads(path.read_text())
    return record, {row["run"]: row for row in record["figures"]}


def _missing(names: list[str]) -> str:
    return (
        f"*Not recorded yet: `python benchmarks/documented_runs.py --runs {','.join(names)}` "
        f"records it in `benchmarks/results/{NAME}.json`.*\n"
    )


def _check(names: list[str]) -> None:
    known = _known_runs()
    for name in names:
        if name not in known:
            raise UnknownRunError(
                f"no documented run {name!r}: define it in benchmarks/documented_commands.py "
                f"(known: {', '.join(known)})"
            )


def _provenance(row: dict[str, Any], record: dict[str, Any]) -> str:
    status = f"exit code {row['exit_code']}, {row['seconds']} s"
    return (
        f"`{row['command']}` ({status}); {row.get('date', record.get('date', ''))} on "
        f"{record.get('machine', 'an unnamed machine')}; from `benchmarks/results/{NAME}.json` "
        f"(`python benchmarks/documented_runs.py --runs {row['run']}`)."
    )


def render_run(name: str, folder: Path = RESULTS) -> str:
    """One run: its provenance, its figures and, for a sweep, its points and analysis."""
    _check([name])
    record, rows = _rows(folder)
    if name not in rows:
        return _missing([name])
    row = rows[name]
    figures = row["figures"]
    parts = [_provenance(row, record)]
    scalars = {_heading(k): v for k, v in figures.items() if not isinstance(v, list)}
    if scalars:
        parts.append(pairs_table(scalars))
    if figures.get("points"):
        parts.append(_rows_table([{k: _dash(v) for k, v in p.items()} for p in figures["points"]]))
    if figures.get("printed"):
        parts.append("```\n" + "\n".join(figures["printed"]) + "\n```")
    if figures.get("analysis"):
        parts.append("\n".join(f"- {line}" for line in figures["analysis"]))
    if not figures:
        parts.append(f"It failed; its last line: `{row['last_line']}`")
    return "\n\n".join(parts) + "\n"


def _heading(key: str) -> str:
    return HEADINGS.get(key, key.replace("_", " "))


def _dash(value: object) -> object:
    return "-" if value is None else value


def render_runs(argument: str, folder: Path = RESULTS) -> str:
    """Several runs as one table, a row each, then their commands."""
    names = argument.split(",")
    _check(names)
    record, rows = _rows(folder)
    missing = [name for name in names if name not in rows]
    if missing:
        return _missing(missing)
    table = []
    for row in (rows[name] for name in names):
        labels = {k: v for k, v in row.items() if k not in NOT_FIGURES}
        figures = {_heading(k): v for k, v in row["figures"].items()}
        table.append({**labels, **figures, "exit code": row["exit_code"]})
    commands = [f"{i}. {_provenance(rows[name], record)}" for i, name in enumerate(names, 1)]
    return (
        _rows_table(table) + "\n\nThe runs, in the table's order:\n\n" + "\n".join(commands) + "\n"
    )
