"""A user's own measured runs (``--calibrate-from FILE``): refit the terms they constrain.

A user who measured their program (its throughput on a POD16 from PopVision or the run's
log) sizes a larger system best from a model refitted to that measurement. The file holds one
JSON object a line: the configuration as PopRun's options give it and the measured
throughput, e.g. ``{"replicas": 16, "instances": 8, "ipus_per_replica": 1, "system":
"pod16", "samples_per_second": 29500}`` (``instances`` and ``ipus_per_replica`` default to
1, ``system`` to the smallest POD that holds the job; ``global_batch`` sets the gradient
accumulation as ``poprun-emu-scaling --global-batch`` does; ``label`` names the line).

Each measurement is a row like the published ones: the program is simulated at its
configuration at the calibrated parameters and at one probe per term (one compiled program:
``probe_points``), which gives its features; the terms the rows weigh most (each term's
share of the rows' step, at least ``MIN_SHARE``; no more terms than rows) are refitted on
the rows with the same least-squares fit as the published rows' (``_cv``), every other term
held at its calibrated value. Each row's cross-validated error is that of a fit without it
(with one row, the calibrated parameters' error: what the measurement corrected).

The refitted run's band comes from those cross-validated errors once there are
``MIN_BAND_RUNS`` of them (the central 80 %, as the published rows' bands are taken); with
fewer, from the published rows of families some fit saw, since the program's own runs now
are in the fit (``UserFit.band``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from contract import FileTooLargeError, read_bounded
from popdist_emu.calibration._bands import band as central_band
from popdist_emu.calibration._cv import TableRow, _fit_block, predict
from popdist_emu.calibration._features import TERMS, RowFeatures, basis

MAX_BYTES = 1 << 20  # a few measured runs; a device or a wrong file is refused, not read
MIN_SHARE = 0.05  # a term weighing less of the rows' step than this is left as calibrated
KEYS = ("replicas", "samples_per_second", "instances", "ipus_per_replica", "system")
OPTIONAL = ("global_batch", "label")
MIN_BAND_RUNS = 3  # fewer measured runs give no band of their own (as coverage needs three)


class MeasurementError(ValueError):
    """A ``--calibrate-from`` file the refit cannot use; its message is one line."""


class Measurement(NamedTuple):
    """One measured run of the user's program."""

    replicas: int
    samples_per_second: float
    instances: int = 1
    ipus_per_replica: int = 1
    system: str = ""
    global_batch: int | None = None
    label: str = ""


def _positive_int(where: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MeasurementError(f"{where}: {name} {value!r} must be a whole number >= 1")
    return value


def read_measurements(path: str | os.PathLike[str]) -> list[Measurement]:
    """The measurements of ``path``, one JSON object a line (blank lines skipped).

    Raises:
        MeasurementError: one line naming the file, the line, the value and the fix.
    """
    try:
        text = read_bounded(path, MAX_BYTES).decode()
    except OSError as error:
        raise MeasurementError(
            f"--calibrate-from {path}: cannot read it ({error.strerror})"
        ) from None
    except FileTooLargeError:
        raise MeasurementError(
            f"--calibrate-from {path}: more than {MAX_BYTES} bytes; name a file of a few "
            "measured runs, one JSON object a line"
        ) from None
    except UnicodeDecodeError:
        raise MeasurementError(
            f"--calibrate-from {path}: not UTF-8 text; write one JSON object a line"
        ) from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"--calibrate-from {path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise MeasurementError(
                f"{where}: not JSON ({error.msg}); write one object a line"
            ) from None
        if not isinstance(record, dict):
            raise MeasurementError(f"{where}: {line.strip()!r} is not a JSON object")
        unknown = sorted(set(record) - set(KEYS) - set(OPTIONAL))
        if unknown:
            raise MeasurementError(
                f"{where}: unknown key {unknown[0]!r}; use {', '.join(KEYS + OPTIONAL)}"
            )
        for key in ("replicas", "samples_per_second"):
            if key not in record:
                raise MeasurementError(f"{where}: {key!r} is missing; every line needs it")
        speed = record["samples_per_second"]
        if (
            isinstance(speed, bool)
            or not isinstance(speed, int | float)
            or not math.isfinite(speed)
            or speed <= 0
        ):
            raise MeasurementError(
                f"{where}: samples_per_second {speed!r} must be a positive number"
            )
        batch = record.get("global_batch")
        out.append(
            Measurement(
                _positive_int(where, "replicas", record["replicas"]),
                float(speed),
                _positive_int(where, "instances", record.get("instances", 1)),
                _positive_int(where, "ipus_per_replica", record.get("ipus_per_replica", 1)),
                str(record.get("system", "")),
                None if batch is None else _positive_int(where, "global_batch", batch),
                str(record.get("label", f"line {number}")),
            )
        )
    if not out:
        raise MeasurementError(f"--calibrate-from {path}: no measurement; write one a line")
    return out


def term_shares(features: Sequence[RowFeatures], values: Mapping[str, float]) -> dict[str, float]:
    """Each term's largest share of a row's step at ``values``: how much the rows say of it."""
    u = basis(values)
    shares = dict.fromkeys(TERMS, 0.0)
    for f in features:
        step = f.step_seconds(values)
        for k, term in enumerate(TERMS):
            shares[term] = max(shares[term], abs(f.coefficients[k] * u[k]) / step)
    return shares


def constrained_terms(
    features: Sequence[RowFeatures], values: Mapping[str, float]
) -> tuple[str, ...]:
    """The terms the rows constrain: those weighing at least ``MIN_SHARE`` of a row's step,
    the heaviest first, no more than there are rows."""
    shares = term_shares(features, values)
    heavy = sorted((t for t in TERMS if shares[t] >= MIN_SHARE), key=lambda t: -shares[t])
    return tuple(heavy[: len(features)])


class UserFit(NamedTuple):
    """The refit: the values of every term, the changed ones and each row's errors."""

    values: dict[str, float]
    changed: dict[str, tuple[float, float]]  # term -> (calibrated, refitted)
    errors: tuple[float, ...]  # each row's relative error with the refit
    cross_validated: tuple[float, ...]  # each row's error with a fit without it

    def band(self, family_seen: Mapping[str, float]) -> dict[str, object]:
        """The band a refitted run's report prints, as the refitted file stores it: the
        central 80 % of the measured runs' cross-validated residuals (``measured_runs``)
        when there are at least ``MIN_BAND_RUNS``; else ``family_seen``, the published
        rows' band for a family some fit saw (``{"low", "high", "rows"}``)."""
        if len(self.cross_validated) >= MIN_BAND_RUNS:
            residuals = [-math.log1p(error) for error in self.cross_validated]
            return {**central_band(residuals).to_json(), "kind": "measured_runs"}
        return {**family_seen, "kind": "family_seen"}

    def lines(self, measurements: Sequence[Measurement]) -> list[str]:
        """What the launcher prints: each changed term, then each row's errors."""
        out = [
            f"--calibrate-from: {term} {old:.4g} -> {new:.4g}"
            for term, (old, new) in self.changed.items()
        ] or ["--calibrate-from: no term weighs enough in these runs to refit; none changed"]
        for m, error, cv in zip(measurements, self.errors, self.cross_validated, strict=True):
            out.append(
                f"--calibrate-from: {m.label} ({m.replicas} replicas): error {error:+.1%} "
                f"refitted, {cv:+.1%} cross-validated (a fit without it)"
            )
        return out


def refit(
    measurements: Sequence[Measurement],
    features: Sequence[RowFeatures],
    values: Mapping[str, float],
    prior_weight: float = 0.02,
) -> UserFit:
    """The terms the ``measurements`` constrain, refitted on them from the calibrated
    ``values``; each row's error refitted and with a fit without it."""
    rows = [
        TableRow(f, m.samples_per_second, "") for m, f in zip(measurements, features, strict=True)
    ]
    terms = constrained_terms(features, values)
    base = dict(values)

    def fitted(keep: Sequence[TableRow]) -> dict[str, float]:
        usable = terms[: len(keep)]
        return {**base, **_fit_block(keep, usable, base, prior_weight)} if usable else base

    new = fitted(rows)
    want = np.array([r.published for r in rows])
    errors = predict(rows, new) / want - 1.0
    loo = []
    for i, row in enumerate(rows):
        held = fitted(rows[:i] + rows[i + 1 :])
        loo.append(float(predict([row], held)[0] / row.published - 1.0))
    changed = {t: (base[t], new[t]) for t in terms if not math.isclose(base[t], new[t])}
    return UserFit(new, changed, tuple(float(e) for e in errors), tuple(loo))
