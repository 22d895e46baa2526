"""The cheap fit over a feature table and its cross-validation, on synthetic rows whose
published figures a known set of parameters produced."""

import time

import numpy as np
import pytest

from popdist_emu import calibration
from popdist_emu.calibration import _cv

TRUTH = {**_cv.PRIOR, "compute_efficiency": 0.3, "matmul_efficiency": 0.45}
TRUTH["multi_ipu_sync_seconds"] = 0.1
SET = calibration.CalibrationSet(
    (
        calibration.TermFit("convs", ("compute_efficiency",), ("c1", "c2", "c3")),
        calibration.TermFit(
            "transformers", ("matmul_efficiency", "multi_ipu_sync_seconds"), ("t1", "t2", "t3")
        ),
    ),
    {"Conv": "CNN", "Transformer": "T"},
    prior_weight=0.0,
)


def row(model, flops, matmul, calls, noise=1.0):
    coefficients = [0.0] * len(calibration.TERMS)
    coefficients[calibration.TERMS.index("compute_efficiency")] = flops
    coefficients[calibration.TERMS.index("matmul_efficiency")] = matmul
    coefficients[calibration.TERMS.index("multi_ipu_sync_seconds")] = calls
    features = calibration.RowFeatures(0.01, tuple(coefficients), 1000.0)
    published = features.samples_per_second(TRUTH) * noise
    return calibration.TableRow(features, published, model)


def table(noise=(1.0,) * 8):
    return {
        "c1": row("Conv", 0.05, 0.0, 0, noise[0]),
        "c2": row("Conv", 0.10, 0.001, 0, noise[1]),
        "c3": row("Conv", 0.20, 0.0, 0, noise[2]),
        "c4": row("Conv", 0.07, 0.0, 0, noise[3]),  # a check row no fit uses
        "t1": row("Transformer", 0.01, 0.10, 1, noise[4]),
        "t2": row("Transformer", 0.01, 0.30, 1, noise[5]),
        "t3": row("Transformer", 0.02, 0.05, 1, noise[6]),
        "t4": row("Transformer", 0.01, 0.20, 1, noise[7]),
    }


def test_the_fit_finds_the_parameters_that_made_the_rows():
    values = calibration.fit_table(table(), SET)
    for term in ("compute_efficiency", "matmul_efficiency", "multi_ipu_sync_seconds"):
        assert values[term] == pytest.approx(TRUTH[term], rel=1e-4)


def test_exact_rows_cross_validate_exactly_and_noisy_rows_do_not():
    _, cv = calibration.cross_validate(table(), SET)
    for key, r in table().items():
        assert cv[key].leave_one_row_out == pytest.approx(r.published, rel=1e-4)
    assert cv["c1"].calibration and not cv["c4"].calibration
    assert cv["c4"].family_seen and cv["c1"].family_seen
    noisy = table((1.05, 0.97, 1.0, 1.0, 1.1, 0.95, 1.0, 1.0))
    _, cv = calibration.cross_validate(noisy, SET)
    t1 = noisy["t1"].published
    assert abs(cv["t1"].leave_one_row_out / t1 - 1) > abs(cv["t1"].in_sample / t1 - 1)
    # a row no fit uses: the fit without it is the fit
    assert cv["c4"].leave_one_row_out == cv["c4"].in_sample


def test_without_its_family_a_fit_sets_its_terms_on_the_rows_left():
    full, cv = calibration.cross_validate(table(), SET)  # refits start from the full fit
    without = calibration.fit_table(table(), SET.without({"t1", "t2", "t3"}), full)
    expected = calibration.predict_table([table()["t4"]], without)[0]
    assert cv["t4"].leave_one_family_out == pytest.approx(expected, rel=1e-6)
    # with no row at all, every term stays at its prior
    empty = calibration.fit_table({}, SET)
    assert empty["compute_efficiency"] == _cv.PRIOR["compute_efficiency"]
    assert empty["matmul_efficiency"] == _cv.PRIOR["matmul_efficiency"]


def test_refits_are_cheap():
    big = {f"{k}{i}": r for i in range(6) for k, r in table().items()}
    rows = SET.fits
    declared = SET._replace(
        fits=tuple(
            f._replace(rows=tuple(f"{k}{i}" for i in range(6) for k in f.rows)) for f in rows
        )
    )
    started = time.perf_counter()
    calibration.cross_validate(big, declared)
    assert time.perf_counter() - started < 10  # 36 leave-one-row-out refits and 2 families


def test_a_set_refuses_unknown_and_twice_set_terms():
    with pytest.raises(ValueError, match="'speed', not a fitted term"):
        SET._replace(fits=(calibration.TermFit("x", ("speed",), ()),)).check(calibration.TERMS)
    twice = (*SET.fits, calibration.TermFit("y", ("compute_efficiency",), ()))
    with pytest.raises(ValueError, match="set by two fits"):
        SET._replace(fits=twice).check(calibration.TERMS)
    assert np.isfinite(calibration.predict_table(table().values(), TRUTH)).all()
