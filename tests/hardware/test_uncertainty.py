"""How far to trust a prediction: the calibration's leave-one-out band and its range."""

import json
import math

import pytest

import hardware
from hardware._parameters import CALIBRATION_FILE


def test_without_cross_validation_the_band_is_the_rms_of_leave_one_out_errors(tmp_path):
    record = json.loads(CALIBRATION_FILE.read_text())
    record.pop("cross_validation", None)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record))
    rows = record["rows"]
    errors = [r["leave_one_out_error"] for r in rows]
    sigma = math.sqrt(sum(e * e for e in errors) / len(errors))
    calibration = hardware.load_calibration(path)
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


def test_the_band_is_the_cross_validated_one_where_the_file_has_it(tmp_path):
    record = json.loads(CALIBRATION_FILE.read_text())
    bands = {"family_unseen": {"low": 0.6, "high": 1.3, "rows": 40}}
    bands["family_seen"] = {"low": 0.95, "high": 1.08, "rows": 30}
    record["cross_validation"] = {"bands": bands}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record))
    unseen = hardware.load_calibration(path)  # a program no published row ran
    assert unseen.band(1000.0) == pytest.approx((600.0, 1300.0))
    assert unseen.step_band(1.0) == pytest.approx((1 / 1.3, 1 / 0.6))
    assert unseen.relative_spread == pytest.approx(0.35)
    assert unseen.method.startswith("80 % band of the cross-validated errors of 40 published")
    seen = hardware.load_calibration(path, "BERT")  # the user names the family
    assert seen.band(100.0) == pytest.approx((95.0, 108.0)) and "family seen" in seen.method


def test_what_the_calibration_covers_is_not_called_an_extrapolation():
    calibration = hardware.load_calibration()
    pod64 = hardware.get_system("pod64")
    assert calibration.extrapolations(hardware.ReplicaLayout(64, 32), pod64) == []


@pytest.mark.parametrize(
    ("replicas", "system", "words"),
    [
        (65536, "pod65536", "65,536 IPUs: beyond the largest calibration row"),
        (64, "bow-pod64", "Bow"),
    ],
)
def test_each_extrapolation_is_named(replicas, system, words):
    calibration = hardware.load_calibration()
    layout = hardware.ReplicaLayout(replicas, max(replicas // 2, 1))
    lines = calibration.extrapolations(layout, hardware.get_system(system))
    assert len(lines) == 1 and words in lines[0]


def test_no_calibration_file_means_no_band(tmp_path):
    empty = hardware.load_calibration(tmp_path / "missing.json")
    assert empty.relative_spread == 0 and empty.band(5.0) == (5.0, 5.0)
    assert (
        empty.extrapolations(hardware.ReplicaLayout(16, 8), hardware.get_system("pod16"), "") == []
    )


def test_a_calibrated_family_has_its_own_rows_band_and_coverage(tmp_path):
    record = json.loads(CALIBRATION_FILE.read_text())
    record.pop("cross_validation", None)  # the rows' leave-one-out band, not the stored one
    row = {"system": "pod64", "replicas": 8, "published_samples_per_second": 100.0}
    family_rows = [{**row, "error": 0.01, "leave_one_out_error": e} for e in (0.03, -0.04)]
    record["families"] = {"BERT": {"parameters": {}, "data": "BERT rows", "rows": family_rows}}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record))
    bert = hardware.load_calibration(path, "BERT")
    assert bert.data == "BERT rows" and bert.relative_spread == pytest.approx(0.0354, abs=1e-4)
    assert bert.max_ipus == 64  # a row's IPUs are its system's, 8 replicas of 8 IPUs here
    pod64, bow = hardware.get_system("pod64"), hardware.get_system("bow-pod64")
    layout = hardware.ReplicaLayout(8, 1, ipus_per_replica=8)
    assert bert.extrapolations(layout, pod64) == []
    assert [line.split(":")[0] for line in bert.extrapolations(layout, bow)] == ["Bow IPU"]
    # The shared fit's rows otherwise; each figure names the fit its band comes from.
    shared = hardware.load_calibration(path)
    assert shared.data == record["data"] == hardware.load_calibration(path, "ResNet-50").data
    assert bert.parameter_set == "BERT fit (BERT)"
    assert shared.parameter_set == "shared fit (ResNet-50)"
    assert hardware.load_calibration(tmp_path / "none.json").parameter_set == "uncalibrated priors"


def test_a_step_mostly_of_fixed_operation_costs_is_called_an_extrapolation():
    calibration = hardware.load_calibration()
    assert 0 < calibration.fixed_cost_share < 1  # calibrate.py records the rows' share
    layout, pod64 = hardware.ReplicaLayout(64, 32), hardware.get_system("pod64")
    inside = calibration.fixed_cost_share + 0.05
    beyond = calibration.fixed_cost_share + 0.15
    assert calibration.extrapolations(layout, pod64, inside) == []
    (line,) = calibration.extrapolations(layout, pod64, beyond)
    assert line.startswith(f"fixed cost per operation {beyond:.0%} of the compute")
    # Without a recorded share nothing is checked.
    unrecorded = hardware.Calibration(calibration.rows, calibration.data, ("ResNet-50",))
    assert unrecorded.extrapolations(layout, pod64, 0.99) == []


@pytest.mark.parametrize("num_ops", [0, 1_000, 100_000])
def test_the_fixed_cost_share_is_the_compute_sets_part_of_a_micro_batch(num_ops):
    profile = hardware.StepProfile(
        grad_flops=2e11,
        grad_bytes_accessed=1e10,
        num_ops=num_ops,
        micro_batch_size=20,
        gradient_accumulation=4,
        device_iterations=2,
        precision="float16",
    )
    pod16 = hardware.get_system("pod16")
    sim = hardware.simulate_step(profile, hardware.ReplicaLayout(16, 8), pod16)
    params = sim.parameters
    fixed = num_ops * params.compute_set_seconds  # the Mk2 clock is the fit's
    arithmetic = hardware.compute_seconds(2e11, 1e10, 0.0, pod16.ipu, "float16", params)
    assert hardware.fixed_cost_share(sim) == pytest.approx(fixed / (fixed + arithmetic))
