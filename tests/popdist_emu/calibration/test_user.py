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


def test_a_refit_earns_a_band_of_its_own_from_three_measured_runs_and_not_before():
    """One measured run says nothing of the spread: the refitted run takes the published
    rows' band for a family some fit saw. Three runs (C1-C3 as measured) give the central
    80 % of their own cross-validated residuals, bracketing the prediction itself."""
    values = hardware.load_parameters().to_json()
    seen = {"low": 0.9, "high": 1.2, "rows": 39}
    rows = [_features(key) for key in ("C1", "C2", "C3")]
    measured = [calibration.Measurement(r["replicas"], r["published"]) for _, r in rows]
    one = calibration.refit_measurements(measured[:1], [f for f, _ in rows[:1]], values)
    assert one.band(seen) == {**seen, "kind": "family_seen"}
    three = calibration.refit_measurements(measured, [f for f, _ in rows], values)
    band = three.band(seen)
    factors = [1 / (1 + e) for e in three.cross_validated]  # published / predicted
    assert band["kind"] == "measured_runs" and band["rows"] == 3
    assert min(min(factors), 1.0) <= band["low"] <= 1.0 <= band["high"] <= max(max(factors), 1.0)
    assert band["high"] - band["low"] > 0


def test_a_refitted_file_names_its_runs_in_the_parameters_and_the_band(tmp_path):
    """What a job reads after ``--calibrate-from``: the refitted values, the file they came
    from in the parameter set's words, and the band the refit earned, in the band's method."""
    values = hardware.load_parameters().to_json()
    user, record = _features("C1")
    fit = calibration.refit_measurements(
        [calibration.Measurement(record["replicas"], record["published"])], [user], values
    )
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(calibration.refitted_file(fit, "mine/runs.jsonl")))
    parameters = hardware.load_parameters(path)
    assert parameters.compute_efficiency == pytest.approx(fit.values["compute_efficiency"])
    assert "refitted to the measured runs of runs.jsonl" in parameters.parameter_set
    band = hardware.load_calibration(path)
    assert band.cv_kind == "family_seen" and band.method.endswith("(--calibrate-from refit)")
    assert "refitted to runs.jsonl" in band.parameter_set
    shipped = hardware.load_calibration()
    assert shipped.cv_kind == "family_unseen" and "refit" not in shipped.method


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
