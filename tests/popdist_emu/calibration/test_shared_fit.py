"""The shipped shared fit is what fitting again gives: ``hardware/calibration.json``'s five
parameters, each ResNet-50 row's prediction and error, and one row's leave-one-out
prediction.

One ResNet-50 step profile at micro-batch 20 (compiled from shapes, shared with
``tests/benchmarks/test_validate.py``: the ``resnet50_profile`` fixture) and two of the five
fits of ``calibrate_shared``: the fit on every row, and the leave-one-out fit of one row
(:data:`SAMPLED`, the one whose fit converges in the fewest evaluations, about 3 s; the
other three, about 20 s more, run the same code on other rows, which
``test_calibrate_shared_holds_each_row_out_in_turn`` checks on a small synthetic step). A
change to the cost model, the
rows, the prior or the bounds that is not followed by ``python benchmarks/calibrate.py
--write`` fails here.
"""

import json
import math

import pytest

import hardware
from popdist_emu import calibration

# The optimiser's last bits may differ between machines and library versions; a value that
# differs by more is a different fit. The stored rows are rounded (0.1 sample/s, 1e-4 error).
PARAMETER_RELATIVE = 1e-6
ROUNDING = {"predicted_samples_per_second": 0.05, "leave_one_out_predicted": 0.05}
ROUNDING |= {"error": 5e-5, "leave_one_out_error": 5e-5}


SAMPLED = 2  # the row whose leave-one-out fit is done again (POD128)


@pytest.fixture(scope="module")
def refit(resnet50_profile):
    """``calibrate_shared``'s result with the leave-one-out fit of :data:`SAMPLED` only (the
    other rows' leave-one-out predictions NaN: not compared)."""
    profile, rows = resnet50_profile, calibration.RESNET50_ROWS
    parameters = calibration.fit_shared(profile, rows)
    held_out = calibration.fit_shared(profile, rows[:SAMPLED] + rows[SAMPLED + 1 :])
    predicted = tuple(calibration.predict_row(profile, row, parameters) for row in rows)
    loo = tuple(
        calibration.predict_row(profile, row, held_out) if i == SAMPLED else math.nan
        for i, row in enumerate(rows)
    )
    share = max(
        hardware.fixed_cost_share(calibration.simulate_row(profile, row, parameters))
        for row in rows
    )
    return calibration.SharedCalibration(rows, parameters, predicted, loo, share)


@pytest.fixture(scope="module")
def stored():
    return json.loads(hardware.CALIBRATION_FILE.read_text())


def _unrounded(fit: calibration.SharedCalibration) -> list[dict]:
    """Each row's figures before the record rounds them."""
    return [
        {
            "predicted_samples_per_second": predicted,
            "error": predicted / row.samples_per_second - 1.0,
            "leave_one_out_predicted": loo,
            "leave_one_out_error": loo / row.samples_per_second - 1.0,
        }
        for row, predicted, loo in zip(fit.rows, fit.predicted, fit.leave_one_out, strict=True)
    ]


def mismatches(fit: calibration.SharedCalibration, record: dict) -> list[str]:
    """What of ``record`` (the file's shared part) the fit ``fit`` does not give again."""
    found = []
    for name in calibration.SHARED_PARAMETERS:  # the structural terms are the families'
        value = getattr(fit.parameters, name)
        if value != pytest.approx(record["parameters"][name], rel=PARAMETER_RELATIVE):
            found.append(f"{name}: fitted {value!r}, stored {record['parameters'][name]!r}")
    rows = [(r["system"], r["replicas"], r["gradient_accumulation"]) for r in record["rows"]]
    if rows != [(r.system, r.replicas, r.gradient_accumulation) for r in fit.rows]:
        return [*found, f"the stored rows are {rows}"]
    for row, figures, kept in zip(fit.rows, _unrounded(fit), record["rows"], strict=True):
        if kept["published_samples_per_second"] != row.samples_per_second:
            found.append(f"{row.system}: published {kept['published_samples_per_second']}")
        for key, value in figures.items():
            if math.isnan(value):  # a leave-one-out fit not done again
                continue
            if abs(value - kept[key]) > ROUNDING[key] * (1 + 1e-6):
                found.append(f"{row.system} {key}: fitted {value!r}, stored {kept[key]!r}")
    return found


def test_the_shipped_parameters_and_rows_are_what_the_fit_gives_again(refit, stored):
    assert mismatches(refit, stored) == [], "run python benchmarks/calibrate.py --write"
    assert stored["fixed_cost_share"] == round(refit.fixed_cost_share, 4)
    assert stored["data"] == calibration.RESNET50_DATA


@pytest.mark.parametrize(
    ("where", "key", "change"),
    [
        ("parameters", "gw_link_latency", 1 + 1e-5),
        ("rows", "predicted_samples_per_second", 1.000004),  # 0.1 sample/s on POD16
        ("rows", "leave_one_out_error", 1.01),
    ],
)
def test_the_comparison_sees_one_stored_value_changed(refit, stored, where, key, change):
    edited = json.loads(json.dumps(stored))
    target = edited["parameters"] if where == "parameters" else edited["rows"][SAMPLED]
    target[key] = target[key] * change
    assert mismatches(refit, edited) != []


def test_the_record_is_the_files_shared_part(refit, stored):
    record = calibration.shared_record(refit, fitted_by=stored["fitted_by"])
    assert set(record) == set(stored) - {"families", "cross_validation"}  # other writers' parts
    assert record["model_families"] == stored["model_families"]
    assert mismatches(refit, record) == []


def test_calibrate_shared_holds_each_row_out_in_turn():
    """Every row's leave-one-out prediction is the fit without that row's, on a synthetic
    step that simulates in microseconds (the shipped rows' are checked above for one row)."""
    profile = hardware.StepProfile(
        grad_flops=2e12, grad_bytes_accessed=4e9, parameter_bytes=5e7, micro_batch_size=20
    )
    rows = calibration.RESNET50_ROWS[:3]
    fit = calibration.calibrate_shared(profile, rows)
    for i, row in enumerate(rows):
        held_out = calibration.fit_shared(profile, rows[:i] + rows[i + 1 :])
        assert fit.leave_one_out[i] == calibration.predict_row(profile, row, held_out)
        assert fit.predicted[i] == calibration.predict_row(profile, row, fit.parameters)
    assert len(set(fit.leave_one_out)) == len(rows)  # each its own fit
