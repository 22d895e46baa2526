"""The declared calibration set: which published rows each fitted term is fitted on.

``benchmarks/calibration_set.json`` is the one place that says it (no row list in code):
its ``fits`` run in order, each setting its ``terms`` (``hardware.ModelParameters`` names)
on its ``rows`` (keys of ``published_rows.py`` and ``bert_rows.py``); its ``families`` name
each row model's family, for leave-one-family-out. ``benchmarks/calibrate*.py`` fit from it,
``benchmarks/validate.py`` cross-validates with it and ``--calibrate-from`` adds a user's
rows to it. :func:`load` refuses a file that names an unknown row or term, or a term twice.
"""

from __future__ import annotations

import json
from pathlib import Path

from bert_rows import (
    BERT_CALIBRATION_ROWS,
    BERT_POPART_ROWS,
    BERT_POPTORCH_ROWS,
    BERT_ROWS,
    BERT_TF1_ROWS,
    BERT_TF2_ROWS,
)
from published_rows import EFFICIENTNET_ROWS, RESNEXT_ROWS, ROWS, VIT_ROWS, ExampleRow, Row

import hardware
from popdist_emu import calibration

SET_FILE = Path(__file__).with_name("calibration_set.json")
# Each row's step as data (benchmarks/row_features.py writes it, validate.py reads it).
FEATURES_FILE = Path(__file__).with_name("row_features.json")
EXAMPLE_ROWS: tuple[ExampleRow, ...] = (
    BERT_CALIBRATION_ROWS
    + BERT_ROWS
    + BERT_TF2_ROWS
    + BERT_POPART_ROWS
    + BERT_POPTORCH_ROWS
    + BERT_TF1_ROWS
    + VIT_ROWS
    + RESNEXT_ROWS
    + EFFICIENTNET_ROWS
)


def all_rows() -> dict[str, Row | ExampleRow]:
    """Every published row by its key: ResNet-50's, then the examples'."""
    rows: dict[str, Row | ExampleRow] = {row.key: row for row in ROWS}
    rows.update((row.key, row) for row in EXAMPLE_ROWS)
    return rows


def model_of(row: Row | ExampleRow) -> str:
    """The model a row ran, as the families table names it."""
    return "ResNet-50" if isinstance(row, Row) else row.model


def load(path: Path = SET_FILE) -> calibration.CalibrationSet:
    """The declared set at ``path``.

    Raises:
        ValueError: one line naming an unknown row, term or model, or a term fitted twice.
    """
    data = json.loads(path.read_text())
    known = all_rows()
    fits = tuple(
        calibration.TermFit(fit["name"], tuple(fit["terms"]), tuple(fit["rows"]))
        for fit in data["fits"]
    )
    families = dict(data["families"])
    for fit in fits:
        for key in fit.rows:
            if key not in known:
                raise ValueError(f"{path}: fit {fit.name!r} names row {key!r}, which no table has")
    for row in known.values():
        if model_of(row) not in families:
            raise ValueError(f"{path}: model {model_of(row)!r} has no family in 'families'")
    checked = calibration.CalibrationSet(fits, families, float(data["prior_weight"]))
    checked.check(hardware.FITTED_PARAMETERS)
    return checked


def fit_rows(name: str, path: Path = SET_FILE) -> tuple[Row | ExampleRow, ...]:
    """The published rows the fit ``name`` is fitted on, in the file's order."""
    rows = all_rows()
    for fit in load(path).fits:
        if fit.name == name:
            return tuple(rows[key] for key in fit.rows)
    raise ValueError(f"{path} declares no fit {name!r}")


def calibration_keys(path: Path = SET_FILE) -> frozenset[str]:
    """The keys of every row some fit is fitted on."""
    return frozenset(key for fit in load(path).fits for key in fit.rows)
