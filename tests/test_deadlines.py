"""One scale factor for every deadline the tests set (``tests/deadlines.py``)."""

import os
import subprocess
import sys

import pytest
from deadlines import VARIABLE, scale, within
from repo_scripts import ROOT


def _within_under(value: str) -> subprocess.CompletedProcess:
    code = "from deadlines import within, scale; print(within(10) / 10, scale())"
    env = {**os.environ, VARIABLE: value, "PYTHONPATH": str(ROOT / "tests")}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=within(60)
    )


def test_the_configured_factor_scales_every_deadline_and_the_load_only_raises_it():
    out = _within_under("3.5")
    assert out.returncode == 0, out.stderr
    factor, now = map(float, out.stdout.split())
    assert factor >= 3.5 and now >= 3.5
    assert within(10) >= 10 and scale() >= 1


@pytest.mark.parametrize("value", ["0.5", "two", "nan", "-1"])
def test_a_bad_factor_is_refused_in_one_line_naming_it(value):
    out = _within_under(value)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert f"{VARIABLE}={value!r}: give a number of at least 1" in last


@pytest.mark.timeout(7)
def test_a_tests_own_timeout_is_scaled_as_it_starts(request):
    scaled, own = request.node.iter_markers("timeout")  # the scaled one first, then the test's
    assert own.args == (7,) and scaled is request.node.get_closest_marker("timeout")
    assert scaled.args[0] >= 7 * float(os.environ.get(VARIABLE, "1"))
