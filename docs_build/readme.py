"""The README's one generated block: how the hardware model does on Graphcore's published
rows, rendered from ``benchmarks/results/validate.json``.

The README is read as it is (on GitHub and PyPI), so no MkDocs hook can fill it: this
module writes the block between its two markers, and ``tests/test_docs.py`` fails when the
block is not what the results file gives. After ``python benchmarks/validate.py --write``,
``python -m docs_build.readme`` refreshes it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from contract import write_atomically
from docs_build.results import RESULTS, ROOT

README = ROOT / "README.md"
VALIDATION = RESULTS / "validate.json"
START = "<!-- generated: validation summary (python -m docs_build.readme) -->"
END = "<!-- end of the generated block -->"
# The summary's figures, each with what it measures (benchmarks/validate.py computes them).
MEASURES = (
    ("loo_row_median_abs_error", "median error, each row predicted by a fit made without it"),
    ("loo_row_share_within_10pct", "rows within 10 % of their published figure (same fits)"),
    ("loo_family_median_abs_error", "median error, each family predicted by a fit without it"),
    ("coverage_80pct_band", "published figures inside their row's 80 % band"),
    ("scale_out_median_abs_error", "median error of the speed-up from a group's smallest system"),
)


def render(summary: dict) -> str:
    """The block's table from ``validate.json``'s ``summary``."""
    lines = [
        f"| on {summary['rows']} published rows ({summary['calibration_rows']} in the fits) | |",
        "|---|---|",
    ]
    lines += [f"| {label} | {100 * summary[key]:.1f} % |" for key, label in MEASURES]
    return "\n".join(lines)


def refreshed(readme: str, summary: dict) -> str:
    """``readme`` with its generated block rendered from ``summary``.

    Raises:
        ValueError: the README lacks one of the markers.
    """
    if START not in readme or END not in readme:
        raise ValueError(f"no block between {START!r} and {END!r}")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{render(summary)}\n{END}{tail}"


def summary_of(path: Path = VALIDATION) -> dict:
    """The ``summary`` of the latest validation run."""
    return json.loads(path.read_text())["figures"]["summary"]


def main(readme: Path = README, validation: Path = VALIDATION) -> int:
    """Rewrites the README's block (to a temporary name, renamed into place); a README
    without the markers or an unreadable results file is one line and exit status 2."""
    try:
        text = readme.read_text()
        new = refreshed(text, summary_of(validation))
    except (OSError, ValueError, KeyError) as error:
        print(f"docs_build.readme: {readme}: {error}", file=sys.stderr)
        return 2
    if new != text:
        write_atomically(readme, new)
    print(f"{readme.name}: validation summary {'refreshed' if new != text else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
