"""benchmarks/host_bound_repeats.py: its program is host-bound, and the verdict counts a
prediction outside another run's band."""

import pytest
from repo_scripts import load_benchmark

repeats = load_benchmark("host_bound_repeats")


def _row(run: int, value: float, low: float, high: float) -> dict:
    return {
        "run": run,
        "samples_per_second": value,
        "band_low": low,
        "band_high": high,
        "band_relative": (high - low) / 2 / value,
        "host_in_band": 0.05,
        "host_bound": True,
    }


def test_a_prediction_outside_another_runs_band_breaks_the_agreement():
    rows = repeats.agreement([_row(1, 100, 95, 110), _row(2, 104, 99, 114), _row(3, 101, 96, 111)])
    assert [r["holds_others"] for r in rows] == ["2 of 2", "2 of 2", "2 of 2"]
    assert repeats.summarise(rows)["agree"]
    rows = repeats.agreement([_row(1, 100, 95, 110), _row(2, 94, 89, 104)])
    assert [r["holds_others"] for r in rows] == ["0 of 1", "1 of 1"]
    verdict = repeats.summarise(rows)
    assert not verdict["agree"] and verdict["predictions_spread"] == (100 - 94) / 97
    assert verdict["largest_deviation"] == pytest.approx(3 / 97)
    assert verdict["median_host_in_band"] == 0.05


def test_the_program_is_host_bound_offline_and_its_band_carries_the_host(tmp_path):
    (tmp_path / "host_bound.py").write_text(repeats.PROGRAM)
    run = repeats.run_once(tmp_path, 0)
    assert run["host_bound"] and run["host_spread_measured"] > 0
    assert run["host_relative"] == run["host_spread_measured"]
    assert run["host_in_band"] > run["host_relative"]  # at the 80 % band's coverage
