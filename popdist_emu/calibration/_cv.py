"""The cheap fit over rows' features, and its cross-validation.

A declared calibration set (``benchmarks/calibration_set.json``) says which rows each fitted
term is fitted on: an ordered list of fits, each setting its terms on its rows with the
others held, repeated until the terms settle (block coordinate descent: each fit is the
least-squares problem of the old per-family commands). Every row's step is its features
(``calibration.RowFeatures``), so a fit is arithmetic over a table and a refit without a
row, or without every row of a family, takes milliseconds: :func:`cross_validate` gives
each row's prediction in-sample, leave-one-row-out and leave-one-family-out.

The residuals minimised are the relative throughput errors, in log space of the parameters,
with a weak log-normal pull toward each parameter's documented prior
(``hardware.ModelParameters``' defaults; none for a term whose prior is 0) so that an
under-determined fit (four rows, five terms) stays at physical values. A fit left with no
row (every row of its family held out) sets its terms on all the rows left, as a fit made
without that family would; with no row at all, the terms stay at their priors.

References:
    Hastie, Tibshirani and Friedman, "The Elements of Statistical Learning", 2nd ed.,
    section 7.10 (cross-validation; leave-one-out); Branch, Coleman and Li, SIAM J. Sci.
    Comput. 21(1), 1999 (``scipy.optimize.least_squares``' "trf" method); Wright,
    "Coordinate descent algorithms", Math. Program. 151, 2015 (block coordinate descent).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
from scipy.optimize import least_squares

import hardware
from popdist_emu.calibration._features import TERMS, RowFeatures, basis

PRIOR = hardware.ModelParameters().to_json()  # the documented priors
START = {**PRIOR, "multi_ipu_sync_seconds": 0.05}  # where a fit starts (a 0 prior cannot)
BOUNDS = {  # physical ranges, wide
    "compute_efficiency": (1e-3, 1.0),
    "matmul_efficiency": (1e-3, 1.0),
    "ipu_link_latency": (1e-9, 1e-2),
    "gw_link_latency": (1e-9, 1e-1),
    "host_sync_seconds": (1e-9, 1e-1),
    "compute_set_seconds": (1e-9, 1e-4),
    "multi_ipu_sync_seconds": (1e-6, 10.0),
}
SWEEPS = 8  # at most this many rounds of the fits
TOLERANCE = 1e-6  # relative change of every term that ends the rounds


class TermFit(NamedTuple):
    """One fit of the declared set: the ``terms`` it sets and the ``rows`` it sets them on."""

    name: str
    terms: tuple[str, ...]
    rows: tuple[str, ...]


class CalibrationSet(NamedTuple):
    """The declared calibration set: the fits in order, each row model's family and the
    prior's weight (residual per e-fold away from a prior)."""

    fits: tuple[TermFit, ...]
    families: Mapping[str, str]
    prior_weight: float = 0.02

    @property
    def keys(self) -> frozenset[str]:
        """Every row some fit is fitted on."""
        return frozenset(key for fit in self.fits for key in fit.rows)

    def check(self, names: Collection[str]) -> None:
        """Refuses a term that is not one of ``names`` or that two fits set.

        Raises:
            ValueError: one line naming the term.
        """
        seen: set[str] = set()
        for fit in self.fits:
            for term in fit.terms:
                if term not in names:
                    raise ValueError(
                        f"fit {fit.name!r} sets {term!r}, not a fitted term: use one of "
                        f"{', '.join(names)}"
                    )
                if term in seen:
                    raise ValueError(f"term {term!r} is set by two fits; give it to one")
                seen.add(term)

    def without(self, keys: Collection[str]) -> CalibrationSet:
        """The same set with the rows of ``keys`` left out of every fit."""
        fits = tuple(f._replace(rows=tuple(k for k in f.rows if k not in keys)) for f in self.fits)
        return self._replace(fits=fits)


class TableRow(NamedTuple):
    """A row of the feature table: its features, published figure and model."""

    features: RowFeatures
    published: float  # samples per second
    model: str


def predict(rows: Iterable[TableRow], values: Mapping[str, float]) -> np.ndarray:
    """Samples per second of ``rows`` at the parameter ``values``."""
    rows = list(rows)
    if not rows:
        return np.zeros(0)
    c = np.array([r.features.coefficients for r in rows])
    b = np.array([r.features.constant for r in rows])
    s = np.array([r.features.samples_per_step for r in rows])
    return s / (b + c @ basis(values))


def _fit_block(
    rows: Sequence[TableRow], terms: Sequence[str], values: dict[str, float], weight: float
) -> dict[str, float]:
    """``terms`` minimising ``rows``' squared relative error, the others held at ``values``;
    with no rows, the terms' priors."""
    if not rows:
        return {t: PRIOR[t] for t in terms}
    want = np.array([r.published for r in rows])
    priors = [(i, np.log(PRIOR[t])) for i, t in enumerate(terms) if PRIOR[t] > 0]
    low = np.log([BOUNDS[t][0] for t in terms])
    high = np.log([BOUNDS[t][1] for t in terms])
    x0 = np.clip(np.log([max(values[t], BOUNDS[t][0]) for t in terms]), low, high)

    def at(x: np.ndarray) -> dict[str, float]:
        return {**values, **dict(zip(terms, np.exp(x), strict=True))}

    def residuals(x: np.ndarray) -> np.ndarray:
        pull = [weight * (x[i] - p) for i, p in priors]
        return np.concatenate([predict(rows, at(x)) / want - 1.0, pull])

    result = least_squares(residuals, x0, bounds=(low, high), method="trf")
    return {t: float(v) for t, v in zip(terms, np.exp(result.x), strict=True)}


def fit(
    table: Mapping[str, TableRow],
    calibration_set: CalibrationSet,
    start: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Every term's value: the set's fits in order, each on its rows of ``table`` (a row the
    table lacks is skipped; a fit with none left on all the set's rows left), repeated until
    no term moves by ``TOLERANCE``."""
    values = dict(START if start is None else start)
    every = [table[k] for k in sorted(calibration_set.keys) if k in table]
    for _ in range(SWEEPS):
        before = dict(values)
        for f in calibration_set.fits:
            # A fit left without rows (its family held out) sets its terms on every row left.
            rows = [table[k] for k in f.rows if k in table] or every
            values.update(_fit_block(rows, f.terms, values, calibration_set.prior_weight))
        if all(abs(values[t] - before[t]) <= TOLERANCE * abs(before[t]) for t in TERMS):
            break
    return values


class CrossValidated(NamedTuple):
    """A row's predictions (samples per second) by the three fits of :func:`cross_validate`."""

    in_sample: float  # the fit on the whole set
    leave_one_row_out: float  # a fit without this row (in-sample when it is in no fit)
    leave_one_family_out: float  # a fit without any row of its model's family
    calibration: bool  # whether some fit uses the row
    family_seen: bool  # whether a fit uses another row of its family


def family_of(calibration_set: CalibrationSet, row: TableRow) -> str:
    """The model family of ``row`` (its model where the set names none)."""
    return calibration_set.families.get(row.model, row.model)


def cross_validate(
    table: Mapping[str, TableRow], calibration_set: CalibrationSet
) -> tuple[dict[str, float], dict[str, CrossValidated]]:
    """The full fit's values and each row's cross-validated predictions."""
    full = fit(table, calibration_set)
    keys = calibration_set.keys & set(table)
    fits: dict[frozenset[str], dict[str, float]] = {frozenset(): full}

    def prediction(key: str, drop: frozenset[str]) -> float:
        if drop not in fits:
            fits[drop] = fit(table, calibration_set.without(drop), full)
        return float(predict([table[key]], fits[drop])[0])

    out = {}
    for key, row in table.items():
        family = family_of(calibration_set, row)
        same = frozenset(k for k in keys if family_of(calibration_set, table[k]) == family)
        own = frozenset({key}) & keys
        out[key] = CrossValidated(
            prediction(key, frozenset()),
            prediction(key, own),
            prediction(key, same),
            bool(own),
            bool(same - own),
        )
    return full, out
