"""Bands from cross-validated residuals, their coverage, and scale-out against published rows.

A row's honest error is the one a fit without it makes (``CrossValidated.
leave_one_row_out``); a program of a family no calibration row ran is best measured by
fits without any row of each row's family (``leave_one_family_out``). The band of a
prediction is the central ``BAND`` interval of the log residuals ``log(published /
predicted)`` of rows like it: rows whose family some fit saw (their leave-one-row-out
residuals) or, for a program of an unseen family, every row's leave-one-family-out
residual. Coverage, the share of rows whose published figure lies inside the band made
without that row's own residual, says whether the band holds.

References:
    Hastie, Tibshirani and Friedman, "The Elements of Statistical Learning", 2nd ed.,
    section 7.10 (cross-validation); Hyndman and Fan, "Sample quantiles in statistical
    packages", The American Statistician 50(4), 1996 (numpy's default quantile, their type 7).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from popdist_emu.calibration._cv import CrossValidated

BAND = 0.8  # the central share of the residuals a band spans


class Band(NamedTuple):
    """A multiplicative band: the published figure lies in ``[predicted x low, predicted x
    high]`` for ``BAND`` of the rows like it."""

    low: float
    high: float
    rows: int  # residuals it was taken from

    def contains(self, predicted: float, published: float) -> bool:
        """Whether ``published`` lies inside the band around ``predicted``."""
        return predicted * self.low <= published <= predicted * self.high

    def to_json(self) -> dict:
        """The band as ``validate.json`` and ``calibration.json`` store it."""
        return {"low": round(self.low, 4), "high": round(self.high, 4), "rows": self.rows}


def band(residuals: Sequence[float], share: float = BAND) -> Band:
    """The central ``share`` of log ``residuals`` as factors (1, 1 without residuals),
    widened where needed to hold the prediction itself (factor 1): a band that leaves out the
    figure it is printed around would say the prediction is surely wrong, and the same run
    repeated must land inside its own band."""
    if not residuals:
        return Band(1.0, 1.0, 0)
    tail = (1.0 - share) / 2
    low, high = np.quantile(np.asarray(residuals, dtype=float), [tail, 1.0 - tail])
    return Band(min(math.exp(float(low)), 1.0), max(math.exp(float(high)), 1.0), len(residuals))


def residual(published: float, predicted: float) -> float:
    """``log(published / predicted)``: the factor the prediction missed by, in log."""
    return math.log(published / predicted)


class BandRow(NamedTuple):
    """What a band needs of a row: its published figure and cross-validated predictions."""

    key: str
    published: float
    cv: CrossValidated


def class_residuals(rows: Sequence[BandRow], seen: bool, skip: str = "") -> list[float]:
    """The residuals of the rows like a prediction: ``seen`` (its family some fit saw): the
    leave-one-row-out residuals of rows whose family is seen; else every row's
    leave-one-family-out residual; ``skip`` names a row to leave out."""
    if seen:
        return [
            residual(r.published, r.cv.leave_one_row_out)
            for r in rows
            if r.cv.family_seen and r.key != skip
        ]
    return [residual(r.published, r.cv.leave_one_family_out) for r in rows if r.key != skip]


def bands(rows: Sequence[BandRow]) -> dict[str, Band]:
    """The band of a prediction for a family seen by a fit and for one not seen."""
    return {
        "family_seen": band(class_residuals(rows, True)),
        "family_unseen": band(class_residuals(rows, False)),
    }


def coverage(rows: Sequence[BandRow]) -> dict[str, object]:
    """Each row's band from the other rows like it, whether its published figure lies in it
    around its cross-validated prediction, and the share that does: per class and overall.

    A row of a seen family is predicted leave-one-row-out and banded by the seen class; a
    row of an unseen family leave-one-family-out (the same as its full fit's prediction)
    and banded by the unseen class. A class of fewer than three other rows gives no band.
    """
    inside: dict[str, list[bool]] = {"family_seen": [], "family_unseen": []}
    per_row: dict[str, dict[str, object]] = {}
    for r in rows:
        seen = r.cv.family_seen
        own = class_residuals(rows, seen, skip=r.key)
        if len(own) < 3:
            continue
        b = band(own)
        predicted = r.cv.leave_one_row_out if seen else r.cv.leave_one_family_out
        hit = b.contains(predicted, r.published)
        inside["family_seen" if seen else "family_unseen"].append(hit)
        per_row[r.key] = {"band_low": round(b.low, 4), "band_high": round(b.high, 4), "inside": hit}
    hits = inside["family_seen"] + inside["family_unseen"]
    return {
        "band": BAND,
        "coverage": round(sum(hits) / len(hits), 4) if hits else None,
        "rows": len(hits),
        "by_class": {name: round(sum(v) / len(v), 4) if v else None for name, v in inside.items()},
        "per_row": per_row,
    }


class ScaleRow(NamedTuple):
    """A row of a scale-out group: its size and figures."""

    key: str
    ipus: int
    published: float
    predicted: float


def scale_out(groups: Mapping[str, Sequence[ScaleRow]]) -> list[dict]:
    """For each group of rows that differ only in system size, the published and predicted
    speed-up from its smallest system to each larger one, and the relative error."""
    out = []
    for name, group in groups.items():
        ordered = sorted(group, key=lambda r: r.ipus)
        base = ordered[0]
        for row in ordered[1:]:
            published = row.published / base.published
            predicted = row.predicted / base.predicted
            out.append(
                {
                    "group": name,
                    "from": base.key,
                    "to": row.key,
                    "ipus": f"{base.ipus} -> {row.ipus}",
                    "published_speedup": round(published, 3),
                    "predicted_speedup": round(predicted, 3),
                    "error": round(predicted / published - 1.0, 4),
                }
            )
    return out
