"""A family's closed-form fit: its algebra, and the shipped BERT family's record, whose stored
terms give the stored parameters, errors and leave-one-out errors again without a run."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hardware
from popdist_emu import calibration

PARAMETER_RELATIVE = 1e-6
ROUNDING = {"predicted_samples_per_second": 0.05, "leave_one_out_predicted": 0.05}
ROUNDING |= {"error": 5e-5, "leave_one_out_error": 5e-5}


def _rows(terms, published):
    return [
        calibration.FamilyRow(f"r{i}", "pod16", 4, 96, p, calibration.StepTerms(*t))
        for i, (t, p) in enumerate(zip(terms, published, strict=True))
    ]


@given(
    a=st.floats(0.05, 5.0),
    b=st.floats(0.0, 1.0),
    eta=st.floats(0.1, 0.7),
    sync=st.floats(0.0, 1e-3),
    calls=st.integers(0, 1),
)
def test_two_trial_runs_give_the_terms_of_the_closed_form(a, b, eta, sync, calls):
    efficiencies = calibration.trial_efficiencies(eta)

    def seconds(efficiency):
        return a / efficiency + b + calls * sync

    steps = (seconds(efficiencies[0]), seconds(efficiencies[1]))
    terms = calibration.solve_step_terms(steps, efficiencies, sync, 64.0, calls)
    assert terms.a == pytest.approx(a, rel=1e-6)
    assert terms.b == pytest.approx(b, abs=1e-6 * (a / eta + b + calls * sync))
    assert terms.samples_per_step == 64.0 and terms.calls == calls


def test_the_fit_finds_the_parameters_that_made_the_rows_and_predicts_them_exactly():
    terms = [
        (1.2, 0.3, 2048.0, 1.0),
        (0.6, 0.2, 4096.0, 1.0),
        (2.4, 0.1, 1024.0, 1.0),
        (0.9, 0.4, 3072.0, 1.0),
    ]
    published = calibration.predict_family([calibration.StepTerms(*t) for t in terms], 0.42, 0.11)
    fit = calibration.calibrate_family(_rows(terms, published), shared_efficiency=0.3)
    expected = {"matmul_efficiency": 0.42, "multi_ipu_sync_seconds": 0.11}
    assert fit.parameters == pytest.approx(expected)
    np.testing.assert_allclose(fit.predicted, published, rtol=1e-9)
    np.testing.assert_allclose(fit.leave_one_out, published, rtol=1e-6)


def _stored_family(name="BERT"):
    stored = json.loads(hardware.CALIBRATION_FILE.read_text())
    return stored, stored["families"][name]


def mismatches(fit: calibration.FamilyCalibration, record: dict) -> list[str]:
    """What of the family's ``record`` its fit ``fit`` does not give again."""
    found = []
    for name, value in fit.parameters.items():
        if value != pytest.approx(record["parameters"][name], rel=PARAMETER_RELATIVE):
            found.append(f"{name}: fitted {value!r}, stored {record['parameters'][name]!r}")
    for row, predicted, loo, kept in zip(
        fit.rows, fit.predicted, fit.leave_one_out, record["rows"], strict=True
    ):
        figures = {
            "predicted_samples_per_second": predicted,
            "error": predicted / row.published - 1.0,
            "leave_one_out_predicted": loo,
            "leave_one_out_error": loo / row.published - 1.0,
        }
        for key, value in figures.items():
            if abs(value - kept[key]) > ROUNDING[key] * (1 + 1e-6):
                found.append(f"{row.row} {key}: fitted {value!r}, stored {kept[key]!r}")
    return found


def _refit(stored, family):
    rows = [calibration.FamilyRow.from_record(r) for r in family["rows"]]
    return calibration.calibrate_family(rows, stored["parameters"]["compute_efficiency"])


def test_the_shipped_bert_fit_is_what_its_stored_terms_give_again():
    """The closed form is exact, so the stored terms give the model's predictions at the
    fitted parameters (stored from runs) to their rounding."""
    stored, family = _stored_family()
    assert mismatches(_refit(stored, family), family) == [], (
        "run python benchmarks/calibrate_bert.py --write"
    )


@pytest.mark.parametrize(
    ("key", "change"),
    [("multi_ipu_sync_seconds", 1 + 1e-5), ("error", 1.01), ("leave_one_out_predicted", 1.0001)],
)
def test_the_comparison_sees_one_stored_value_changed(key, change):
    stored, family = _stored_family()
    fit = _refit(stored, family)
    edited = json.loads(json.dumps(family))
    target = edited["parameters"] if key in edited["parameters"] else edited["rows"][1]
    target[key] = target[key] * change
    assert mismatches(fit, edited) != []


def test_the_record_keeps_the_terms_and_leaves_the_closed_form_prediction_to_the_output():
    stored, family = _stored_family()
    fit = _refit(stored, family)
    model = [r["predicted_samples_per_second"] for r in family["rows"]]
    record = calibration.family_record(
        fit,
        model,
        fitted_by=family["fitted_by"],
        data=family["data"],
        fixed_cost_share=family["fixed_cost_share"],
        shared_host_sync=stored["parameters"]["host_sync_seconds"],
        model_families=family["model_families"],
    )
    assert set(record) == set(family)
    # The whole-program values --calibration-family BERT applies: every FLOP at the fitted
    # efficiency, the fitted cost per call as host synchronisation of any replica.
    eta, sync = (record["parameters"][name] for name in calibration.FAMILY_PARAMETERS)
    assert record["override"] == pytest.approx(
        {
            "compute_efficiency": eta,
            "matmul_efficiency": eta,
            "host_sync_seconds": stored["parameters"]["host_sync_seconds"] + sync,
            "multi_ipu_sync_seconds": 0.0,
        }
    )
    assert [calibration.FamilyRow.from_record(r) for r in record["rows"]] == list(fit.rows)
    assert all("closed_form_predicted" not in r for r in record["rows"])
    assert all("closed_form_predicted" in r for r in fit.row_records(model))
