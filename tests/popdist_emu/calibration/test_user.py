"""``--calibrate-from``: a user's measured runs, read, checked and refitted.

The end-to-end check uses a published row as the user's measurement and the larger systems
of its group as what the user wants to size, from the rows' stored features
(``benchmarks/row_features.json``), so it costs no compilation: Graphcore's Bow launch
ResNet-50 figure on a Bow-POD16 (C1) as the measured run, its Bow-POD64 and Bow-POD256
figures (C2, C3) as the checks.
"""

import json

import pytest
from repo_scripts import load_benchmark

import hardware
from popdist_emu import calibration

calibration_set = load_benchmark("calibration_set")


def _features(key):
    record = json.loads(calibration_set.FEATURES_FILE.read_text())["rows"][key]
    return calibration.RowFeatures.from_json(record), record


def test_one_measured_pod16_run_refits_the_term_it_constrains_and_sizes_the_larger_pods():
    values = hardware.load_parameters().to_json()
    user, record = _features("C1")
    measured = calibration.Measurement(record["replicas"], record["published"], label="C1")
    fit = calibration.refit_measurements([measured], [user], values)
    assert list(fit.changed) == ["compute_efficiency"]  # the heaviest term; one row, one term
    assert abs(fit.errors[0]) < 1e-3  # the measurement is met
    # its cross-validated error, a fit without it, is the calibrated parameters' error
    assert fit.cross_validated[0] == pytest.approx(
        user.samples_per_second(values) / record["published"] - 1, abs=1e-9
    )
    lines = fit.lines([measured])
    assert lines[0].startswith("--calibrate-from: compute_efficiency 0.") and "->" in lines[0]
    assert "cross-validated" in lines[1]
    for key in ("C2", "C3"):  # the larger systems: closer with the refit than without
        check, stored = _features(key)
        before = abs(check.samples_per_second(values) / stored["published"] - 1)
        after = abs(check.samples_per_second(fit.values) / stored["published"] - 1)
        assert after < before and after < 0.08, key


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"replicas": 16}', "'samples_per_second' is missing"),
        ('{"replicas": 16, "samples_per_second": -3}', "samples_per_second -3 must be a positive"),
        ('{"replicas": 0, "samples_per_second": 5}', "replicas 0 must be a whole number >= 1"),
        ('{"replicas": 16, "samples_per_second": 5, "speed": 1}', "unknown key 'speed'"),
        ("[16, 5]", "is not a JSON object"),
        ("{replicas: 16}", "not JSON"),
        ("", "no measurement"),
    ],
)
def test_a_bad_file_is_refused_in_one_line_naming_the_line(tmp_path, text, needle):
    path = tmp_path / "runs.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(calibration.MeasurementError) as error:
        calibration.read_measurements(path)
    message = str(error.value)
    assert needle in message and "\n" not in message and str(path) in message
    with pytest.raises(calibration.MeasurementError, match="cannot read it"):
        calibration.read_measurements(tmp_path / "missing.jsonl")
    with pytest.raises(calibration.MeasurementError, match="not a regular file"):
        calibration.read_measurements("/dev/zero")  # refused, never read


def test_a_good_file_reads_with_its_defaults(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"replicas": 16, "instances": 8, "samples_per_second": 29500}\n\n')
    (m,) = calibration.read_measurements(path)
    assert m == calibration.Measurement(16, 29500.0, 8, 1, "", None, "line 1")
