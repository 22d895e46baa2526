"""How far to trust a prediction: the calibration's leave-one-out band and its range."""

import json
import math

import pytest

import hardware
from hardware._parameters import CALIBRATION_FILE


def test_the_band_is_the_rms_of_the_calibration_rows_leave_one_out_errors():
    rows = json.loads(CALIBRATION_FILE.read_text())["rows"]
    errors = [r["leave_one_out_error"] for r in rows]
    sigma = math.sqrt(sum(e * e for e in errors) / len(errors))
    calibration = hardware.load_calibration()
    assert calibration.relative_spread == pytest.approx(sigma)
    assert calibration.band(1000.0) == pytest.approx((1000 * (1 - sigma), 1000 * (1 + sigma)))
    fast, slow = calibration.step_band(0.01)
    assert fast < 0.01 < slow and 1 / fast == pytest.approx((1 + sigma) / 0.01)
    # The published rows it was fitted on are recognised, others are not.
    first = rows[0]
    row = calibration.row_for(first["replicas"], first["published_samples_per_second"])
    assert row is not None and row.leave_one_out_error == first["leave_one_out_error"]
    assert (
        calibration.row_for(first["replicas"], first["published_samples_per_second"] * 1.1) is None
    )


def test_what_the_calibration_covers_is_not_called_an_extrapolation():
    calibration = hardware.load_calibration()
    pod64 = hardware.get_system("pod64")
    assert calibration.extrapolations(hardware.ReplicaLayout(64, 32), pod64, "ResNet-50") == []


@pytest.mark.parametrize(
    ("replicas", "system", "model", "words"),
    [
        (65536, "pod65536", "ResNet-50", "65,536 IPUs: beyond the largest calibration row"),
        (64, "bow-pod64", "ResNet-50", "Bow"),
        (16, "pod16", "BERT-large", "model BERT-large"),
    ],
)
def test_each_extrapolation_is_named(replicas, system, model, words):
    calibration = hardware.load_calibration()
    layout = hardware.ReplicaLayout(replicas, max(replicas // 2, 1))
    lines = calibration.extrapolations(layout, hardware.get_system(system), model)
    assert len(lines) == 1 and words in lines[0]


def test_no_calibration_file_means_no_band(tmp_path):
    empty = hardware.load_calibration(tmp_path / "missing.json")
    assert empty.relative_spread == 0 and empty.band(5.0) == (5.0, 5.0)
    assert (
        empty.extrapolations(hardware.ReplicaLayout(16, 8), hardware.get_system("pod16"), "x") == []
    )
