"""The census of PopTorch names Graphcore's programs use (``census.csv``), as a test.

``census.csv`` holds every PopTorch and PopDist name the PopTorch programs of
graphcore/examples (commit 3cc8f81f) use, with how many files and applications use it (the
census in the project's shared reference, ``poptorch-census.md``) and its expected status:
``provided`` (PopTorch's semantics), ``no-effect`` (accepted; it changes neither the numbers
nor the simulated time), ``refused`` (one line naming the call) and ``geometric``
(PopTorch Geometric, a separate package, outside the goal). ``census_program.py`` looks each
name up as a program sees it, in one fresh interpreter.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import within

from popdist_emu.popdist import _poptorch_options

CENSUS = Path(__file__).with_name("census.csv")
PROGRAM = Path(__file__).with_name("census_program.py")
STATUSES = {"provided", "no-effect", "refused", "geometric"}


def _rows() -> list[dict[str, str]]:
    with CENSUS.open(newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


@pytest.fixture(scope="module")
def found() -> dict[str, str]:
    root = Path(__file__).parents[3]
    out = subprocess.run(
        [sys.executable, str(PROGRAM), str(CENSUS)],
        capture_output=True,
        text=True,
        timeout=within(300),
        cwd=root,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, str] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_census_file_is_whole() -> None:
    rows = _rows()
    assert len(rows) == 128 and len({r["name"] for r in rows}) == 128
    assert {r["status"] for r in rows} <= STATUSES
    assert sum(r["status"] == "geometric" for r in rows) == 9


def test_each_name_has_its_status(found: dict[str, str]) -> None:
    wrong = []
    for row in _rows():
        name, status, got = row["name"], row["status"], found[row["name"]]
        named = any(part in got for part in name.split(".")[1:])
        refused_in_one_line = got != "ok" and named and "\n" not in got
        if status in ("provided", "no-effect"):
            good = got == "ok"
        elif status == "refused":
            good = refused_in_one_line
        else:  # geometric: PopTorch Geometric, a separate package
            good = True
        if not good:
            wrong.append(f"{name} ({status}): {got}")
    assert not wrong, "\n".join(wrong)


def test_no_effect_options_are_in_the_no_effect_table() -> None:
    for row in _rows():
        group, _, method = row["name"].removeprefix("Options.").rpartition(".")
        if row["name"].startswith("Options.") and row["status"] == "no-effect":
            assert method in _poptorch_options._NO_EFFECT[group or "Options"], row["name"]


def test_at_least_nine_in_ten_names_outside_poptorch_geometric_are_provided(
    found: dict[str, str],
) -> None:
    rows = [r for r in _rows() if r["status"] != "geometric"]
    provided = sum(found[r["name"]] == "ok" for r in rows)
    print(f"census: {provided} of {len(rows)} names outside poptorch_geometric provided")
    assert provided / len(rows) >= 0.9
