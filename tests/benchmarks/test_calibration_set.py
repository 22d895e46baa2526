"""The declared calibration set: the file the fits read their rows from."""

import json

import pytest
from repo_scripts import load_benchmark

import hardware
from popdist_emu import calibration

calibration_set = load_benchmark("calibration_set")
calibrate = load_benchmark("calibrate")


def test_every_fitted_term_is_fitted_on_declared_rows_by_one_fit():
    declared = calibration_set.load()
    terms = [term for fit in declared.fits for term in fit.terms]
    assert sorted(terms) == sorted(hardware.FITTED_PARAMETERS)
    assert all(fit.rows for fit in declared.fits)
    rows = calibration_set.all_rows()
    assert len(rows) == len(set(rows))  # every key names one row


def test_the_commands_fit_on_the_declared_rows():
    micro_batch, published = calibrate.published_rows()
    assert micro_batch == calibration.RESNET50_MICRO_BATCH
    assert tuple(published) == calibration.RESNET50_ROWS  # the shared fit's tested default
    bert = [row.key for row in calibration_set.fit_rows("BERT")]
    stored = json.loads(hardware.CALIBRATION_FILE.read_text())["families"]["BERT"]["rows"]
    assert bert == [r["row"] for r in stored]


def test_a_set_naming_an_unknown_row_or_term_is_refused(tmp_path):
    data = json.loads(calibration_set.SET_FILE.read_text())
    data["fits"][1]["rows"].append("Z99")
    path = tmp_path / "set.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="names row 'Z99', which no table has"):
        calibration_set.load(path)
    data["fits"][1]["rows"].pop()
    data["fits"][1]["terms"].append("compute_efficiency")
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="'compute_efficiency' is set by two fits"):
        calibration_set.load(path)
