"""Bands from cross-validated residuals, their coverage, and scale-out errors."""

import math

import pytest

from popdist_emu import calibration


def cv(predicted, seen=True, family=None):
    family = predicted if family is None else family
    return calibration.CrossValidated(predicted, predicted, family, False, seen)


def test_a_band_spans_the_central_share_of_the_log_residuals():
    residuals = [math.log(1 + e / 100) for e in range(-10, 11)]  # -10 % to +10 %
    band = calibration.band(residuals)
    assert band.low == pytest.approx(0.92, abs=0.005) and band.high == pytest.approx(
        1.08, abs=0.005
    )
    assert band.contains(100.0, 107.0) and not band.contains(100.0, 111.0)
    assert calibration.band([]).to_json() == {"low": 1.0, "high": 1.0, "rows": 0}


def test_coverage_counts_rows_inside_the_band_made_without_them():
    # Nine rows within 5 % and one 40 % off: the band from the others leaves that one out.
    errors = [0.0, 0.01, -0.02, 0.03, -0.04, 0.05, -0.01, 0.02, -0.03, 0.4]
    rows = [calibration.BandRow(f"r{i}", 100.0, cv(100.0 / (1 + e))) for i, e in enumerate(errors)]
    covered = calibration.coverage(rows)
    assert covered["per_row"]["r9"]["inside"] is False
    assert covered["rows"] == 10 and covered["coverage"] == pytest.approx(0.7)
    assert covered["by_class"]["family_unseen"] is None
    # the unseen class is banded by leave-one-family-out residuals, here twice as wide
    unseen = [calibration.BandRow(r.key, 100.0, cv(100.0, False, r.cv.in_sample)) for r in rows]
    assert calibration.bands(unseen)["family_unseen"].rows == 10
    assert calibration.bands(rows)["family_seen"].high > 1.0


def test_scale_out_compares_speedups_from_the_smallest_system():
    group = [
        calibration.ScaleRow("b", 64, 380.0, 400.0),
        calibration.ScaleRow("a", 16, 100.0, 100.0),
    ]
    (line,) = calibration.scale_out({"g": group})
    assert line["from"] == "a" and line["to"] == "b"
    assert line["published_speedup"] == 3.8 and line["predicted_speedup"] == 4.0
    assert line["error"] == pytest.approx(4.0 / 3.8 - 1, abs=1e-4)
