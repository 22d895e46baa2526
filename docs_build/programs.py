"""The runs of Graphcore's programs (``benchmarks/results/graphcore_programs.json``) as a page
table.

``benchmarks/graphcore_programs.py`` writes one row per run with every field a reader may
need to rerun or compare it (its full command, every loss it printed, its last lines); the
generic results table would show all of them side by side, a command hundreds of characters
wide in every row. This renders one line per run (program, mode, run, exit code, seconds and
what it shows: first and last loss, offline the simulated throughput beside the published
one) and each run's command below the table, so the page stays readable and nothing shown
is retyped.
"""

from __future__ import annotations

from typing import Any

_SHOWN = (
    ("simulated_samples_per_s", "simulated {} samples/s"),
    ("published_samples_per_s", "published {}"),
    ("error_percent", "error {} %"),
)


def _run(row: dict[str, Any]) -> str:
    if "layout" in row:
        return str(row["layout"])
    instances = row.get("instances", 1)
    return f"{instances} instance" + ("s" if instances != 1 else "")


def _shows(row: dict[str, Any]) -> str:
    parts = []
    if "first_loss" in row:
        parts.append(f"loss {row['first_loss']:.4g} -> {row['last_loss']:.4g}")
    elif row.get("losses"):
        parts.append(f"loss {row['losses'][0]:.4g} -> {row['losses'][-1]:.4g}")
    if "same_losses_as_first_layout" in row:
        parts.append(f"same losses as 1 instance: {row['same_losses_as_first_layout']}")
    if "losses_not_compared" in row:
        parts.append(f"losses not compared: {row['losses_not_compared']}")
    for key, text in _SHOWN:
        if key in row:
            value = row[key]
            parts.append(text.format(f"{value:,.0f}" if key != "error_percent" else value))
    if "published_row" in row and parts:
        parts[-1] += f" ({row['published_row']})"
    if not parts and row.get("result"):
        parts.append(str(row["result"]))
    return "; ".join(parts).replace("|", "\\|")


def render_runs(rows: list[dict[str, Any]]) -> str:
    """One table line per run, then each run's command, numbered as in the table."""
    lines = [
        "| # | program | mode | run | exit code | seconds | shows |",
        "|---|---|---|---|---|---|---|",
    ]
    commands = []
    for number, row in enumerate(rows, 1):
        lines.append(
            f"| {number} | {row['program']}: `{row['path']}` | {row['mode']} | {_run(row)} | "
            f"{row['exit_code']} | {row['seconds']} | {_shows(row)} |"
        )
        commands.append(f"{number}. `{row['command']}`")
    return "\n".join(lines) + "\n\nThe runs' commands:\n\n" + "\n".join(commands)
