"""The benchmarks' figures, rendered from ``benchmarks/results/<name>.json``.

Each file holds one benchmark's latest run (``benchmarks/results_file.py`` writes it): the
date, machine, load average and command, and its figures as a dict or a list of rows. A page
names the file with ``<!-- generated: results NAME -->`` and gets the provenance line and a
table, so no figure is retyped; a benchmark not yet run since it started writing its file
renders as a line naming the command that will.
"""

from __future__ import annotations

import json
from pathlib import Path

from docs_build.programs import render_runs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PROVENANCE = ("benchmark", "command", "date", "machine", "load_average")
# Benchmarks whose rows have a table of their own (the generic one would show every field).
ROW_RENDERERS = {"graphcore_programs": render_runs}


def _cell(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        text = f"{value:,}"
    elif isinstance(value, float):
        text = f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    elif isinstance(value, dict | list):
        text = json.dumps(value, separators=(", ", ": "))
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _rows_table(rows: list[dict]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def pairs_table(figures: dict[str, object]) -> str:
    """A ``figure | value`` table, a row per figure."""
    lines = ["| figure | value |", "|---|---|"]
    return "\n".join(lines + [f"| {key} | {_cell(value)} |" for key, value in figures.items()])


def _figures(figures: object) -> str:
    """A dict becomes a two-column table, with each list of rows in it a table of its own;
    a list of rows is one table."""
    if isinstance(figures, list) and all(isinstance(row, dict) for row in figures):
        return _rows_table(figures)
    if not isinstance(figures, dict):
        return f"`{_cell(figures)}`"
    # Figures that are each the same few named values (a median, its range...) are rows of
    # one table; the rest are figure/value lines.
    shapes: dict[tuple, list[dict]] = {}
    for key, value in figures.items():
        if _is_record(value):
            shapes.setdefault(tuple(value), []).append({"figure": key, **value})
    records = [rows for rows in shapes.values() if len(rows) > 1]
    in_records = {row["figure"] for rows in records for row in rows}
    scalars = {k: v for k, v in figures.items() if not _is_rows(v) and k not in in_records}
    parts = [pairs_table(scalars)] if scalars else []
    parts += [_rows_table(rows) for rows in records]
    for key, value in figures.items():
        if _is_rows(value):
            parts.append(f"`{key}`:\n\n{_rows_table(value)}")
        elif isinstance(value, dict) and any(_is_rows(v) for v in value.values()):
            parts.append(f"`{key}`:\n\n{_figures(value)}")
    return "\n\n".join(parts)


def _is_record(value: object) -> bool:
    """A dict of plain values (numbers, text, a short list of numbers): one table row."""
    return isinstance(value, dict) and all(
        not isinstance(v, dict) and not _is_rows(v) for v in value.values()
    )


def _is_rows(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(r, dict) for r in value)


def render(name: str, folder: Path = RESULTS) -> str:
    """The provenance line and tables of ``folder/<name>.json``, or a line naming the
    command that writes it."""
    path = folder / f"{name}.json"
    script = name.split("-")[0]
    if not path.is_file():
        return (
            f"*No figures recorded yet: the next run of `benchmarks/{script}.py` writes "
            f"`benchmarks/results/{name}.json`.*\n"
        )
    record = json.loads(path.read_text())
    provenance = [
        f"`{record['command']}`" if "command" in record else "",
        str(record.get("date", "")),
        f"on {record['machine']}" if "machine" in record else "",
        f"load average {_cell(record['load_average'])}" if "load_average" in record else "",
    ]
    header = ", ".join(p for p in provenance if p)
    header = f"{header}; from `benchmarks/results/{name}.json`." if header else f"From `{name}`."
    # A file written without results_file.py: everything but its provenance is figures.
    figures = record.get("figures", {k: v for k, v in record.items() if k not in PROVENANCE})
    if name in ROW_RENDERERS and _is_rows(figures):
        return f"{header}\n\n{ROW_RENDERERS[name](figures)}\n"
    return f"{header}\n\n{_figures(figures)}\n"
