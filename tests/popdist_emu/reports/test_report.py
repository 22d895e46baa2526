"""summary.json, the Chrome trace and the printed summary."""

import json

import pytest

import hardware
from popdist_emu.reports._summary import format_summary, summary, write_reports


def test_summary_json_has_the_contract_keys(simulation, tmp_path):
    write_reports(simulation, tmp_path / "reports")
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert summary["system"] == "pod128"
    assert summary["replicas"] == 128
    assert summary["simulated_step_seconds"] == simulation.simulated_step_seconds
    assert summary["samples_per_second"] == simulation.samples_per_second
    assert {"compute", "allreduce"} <= set(summary["phases"])
    assert summary["phases"]["allreduce"] > 0
    assert summary["memory_per_ipu"] == simulation.memory_per_ipu
    assert summary["host_io_exposed_seconds"] == simulation.host_io_exposed_seconds


def test_format_summary_is_short_and_says_what_matters(simulation):
    text = format_summary(simulation)
    assert len(text.splitlines()) <= 6
    assert "pod128" in text and "128 replicas" in text and "samples/s" in text
    assert "memory per IPU" in text and "fits" in text
    # Every prediction with its band, and what it extrapolates (a toy model: not ResNet-50).
    calibration = hardware.load_calibration()  # calibration.json's, whatever the fit
    band, method = calibration.relative_spread, calibration.method
    assert f"uncertainty: +/-{100 * band:.1f} % ({method})" in text
    assert "samples/s; calibrated parameters: shared fit (ResNet-50)" in text  # which fit
    # The parameter set, and the fitted terms of each phase, never the model's name.
    assert "parameter set: structural" in text and "model toy" not in text
    assert "compute: compute_efficiency, compute_set_seconds, matmul_efficiency" in text


def test_summary_json_carries_the_band_and_the_extrapolations(simulation):
    u = summary(simulation)["uncertainty"]
    calibration = hardware.load_calibration()  # its cross-validated band where it has one
    low, high = u["samples_per_second"]
    assert (low, high) == pytest.approx(calibration.band(simulation.samples_per_second))
    assert low <= simulation.samples_per_second <= high and low < high  # it holds its own figure
    fast, slow = u["simulated_step_seconds"]
    assert fast <= simulation.simulated_step_seconds <= slow
    assert u["method"] == calibration.method and "MLPerf" in u["calibration"]
    assert u["extrapolations"] == []  # a Mk2 POD128: inside the calibrated range
    assert u["parameters"].startswith("structural") and u["band_family"] == ""
    assert "host_sync_seconds" in u["terms"]["host_sync"]


def test_reports_replace_a_planted_symlink_instead_of_following_it(simulation, tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "summary.json").symlink_to(target)
    write_reports(simulation, tmp_path / "reports")
    assert target.read_text() == "keep me"
    assert not (tmp_path / "reports" / "summary.json").is_symlink()
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        "report.html",
        "summary.json",
        "trace.json",
    ]


def test_a_host_bound_band_says_the_hosts_share(simulation):
    """A step the host decides carries the host's measured spread in its band and says so;
    the same step with the host far behind the IPUs keeps the model's band."""
    ipu_step = simulation.simulated_step_seconds
    samples = simulation.samples_per_step / simulation.layout.num_instances
    bound = hardware.simulate_step(
        simulation.profile.replace(
            host_cpu_seconds_per_sample=3 * ipu_step / samples, host_cpu_relative_spread=0.2
        ),
        simulation.layout,
        simulation.system,
    )
    assert bound.host_bound
    u, plain = summary(bound)["uncertainty"], summary(simulation)["uncertainty"]
    calibration = hardware.load_calibration()
    assert u["host_relative"] == u["host_spread_measured"] == 0.2
    assert u["model_relative"] == pytest.approx(calibration.relative_spread)
    low, high = u["samples_per_second"]
    model_low, model_high = calibration.band(bound.samples_per_second)
    assert low < model_low and high > model_high and u["relative"] > u["model_relative"]
    assert u["host_in_band"] == pytest.approx(hardware.host_half_width(calibration, 0.2))
    at_coverage = f"+/-{100 * u['host_in_band']:.1f} % at the band's coverage"
    said = f"host's measured spread +/-20.0 % ({at_coverage}) in quadrature"
    assert calibration.cv_band and said in format_summary(bound)
    assert plain["host_relative"] == 0 and plain["relative"] == pytest.approx(
        calibration.relative_spread
    )
