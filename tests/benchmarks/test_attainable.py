"""benchmarks/attainable.py: the range it gives holds every model it speaks for, and the
published MLPerf v1.0 Pod64 row lies outside the issue's 10 % of it."""

import math
import subprocess
import sys

import pytest
from deadlines import within
from hypothesis import given, settings
from hypothesis import strategies as st
from repo_scripts import BENCHMARKS, load_benchmark

attainable = load_benchmark("attainable")
published_rows = attainable.published_rows  # the rows it reads, loaded once
Row = published_rows.Row
PODS = (("pod16", 16), ("pod64", 64), ("pod128", 128), ("pod256", 256))


def _row(key, pod, ga, published):
    system, replicas = pod
    return Row(key, system, replicas, 20, ga, published, "test")


@settings(derandomize=True, deadline=None, max_examples=60)
@given(
    u=st.floats(1e-3, 1e-1),
    fixed=st.lists(st.floats(0, 0.2), min_size=4, max_size=4),
    gas=st.lists(st.integers(1, 16), min_size=4, max_size=4),
    errors=st.lists(st.floats(-0.02, 0.02), min_size=4, max_size=4),
    check=st.tuples(st.integers(0, 3), st.integers(1, 16)),
)
def test_every_model_within_the_tolerance_predicts_inside_the_range(u, fixed, gas, errors, check):
    fixed = sorted(fixed)  # no smaller on a larger Pod

    def throughput(pod_index, ga):
        replicas = PODS[pod_index][1]
        return replicas * 20 * ga / (ga * u + fixed[pod_index])

    calibration = [
        _row(f"c{i}", PODS[i], ga, throughput(i, ga) * (1 + e))
        for i, (ga, e) in enumerate(zip(gas, errors, strict=True))
    ]
    pod_index, ga = check
    truth = throughput(pod_index, ga)
    bounds = attainable.attainable(_row("x", PODS[pod_index], ga, truth), calibration, 0.02)
    assert bounds.low * (1 - 1e-6) <= truth <= bounds.high * (1 + 1e-6)
    assert bounds.nearest_error == 0.0


def test_the_range_is_exactly_the_calibration_row_when_the_check_repeats_it():
    row = _row("c", PODS[1], 3, 108_000)
    bounds = attainable.attainable(row._replace(key="x"), [row], 0.02)
    assert bounds.low == pytest.approx(108_000 * 0.98)
    assert bounds.high == pytest.approx(108_000 * 1.02)


def test_a_row_on_a_smaller_pod_than_every_calibration_row_is_unbounded_above():
    calibration = [_row("c", PODS[3], 2, 326_000)]  # all of it may be the update
    bounds = attainable.attainable(_row("x", PODS[0], 10, 1e6), calibration, 0.02)
    assert bounds.high == math.inf and bounds.nearest_error == 0.0


def test_contradicting_calibration_rows_are_refused():
    calibration = [_row("a", PODS[0], 4, 10_000), _row("b", PODS[0], 4, 12_000)]
    with pytest.raises(ValueError, match="raise --tolerance"):
        attainable.attainable(_row("x", PODS[0], 2, 1), calibration, 0.02)


def test_the_mlperf_v1_0_pod64_row_is_out_of_reach_of_the_issue_bar():
    rows = {r["row"]: r for r in attainable.bounded_rows(published_rows.ROWS, 0.02)}
    assert set(rows) == {"A1", "A2"}  # only the Mk2 rows at micro-batch 20 are bounded
    assert rows["A2"]["nearest_error"] > 0.10
    assert rows["A2"]["attainable_low"] > published_rows.ROWS[1].published


def test_a_bad_tolerance_is_one_line_and_exit_2():
    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "attainable.py"), "--tolerance", "1.5"],
        capture_output=True,
        text=True,
        timeout=within(120),
    )
    assert out.returncode == 2
    assert "--tolerance 1.5" in out.stderr.strip().splitlines()[-1]
