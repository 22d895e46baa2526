"""popdist_emu.scaling._analysis: speed-up, efficiency, Karp-Flatt and the fitted laws."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popdist_emu.scaling import _analysis as sa

REPLICAS = [16, 32, 64, 128, 256, 512, 1024]


def test_efficiency_and_karp_flatt_against_hand_computed_values():
    # 16 -> 64 replicas (p = 4) with the throughput tripled: S = 3, E = 3/4,
    # e = (1/3 - 1/4) / (1 - 1/4) = (1/12) / (3/4) = 1/9.
    speed = sa.speedups([16, 64], [1000.0, 3000.0])
    p = sa.relative_size([16, 64])
    assert speed.tolist() == [1.0, 3.0]
    assert p.tolist() == [1.0, 4.0]
    assert sa.efficiency(p, speed).tolist() == [1.0, 0.75]
    e = sa.karp_flatt(p, speed)
    assert math.isnan(e[0])  # undefined at p = 1
    assert e[1] == pytest.approx(1 / 9)
    # p = 2, S = 1.6: E = 0.8, e = (0.625 - 0.5) / 0.5 = 0.25.
    assert sa.efficiency([2.0], [1.6])[0] == pytest.approx(0.8)
    assert sa.karp_flatt([2.0], [1.6])[0] == pytest.approx(0.25)


def test_karp_flatt_of_an_amdahl_curve_is_its_serial_fraction():
    p = sa.relative_size(REPLICAS)
    s = 0.03
    np.testing.assert_allclose(sa.karp_flatt(p, sa.amdahl(p, s))[1:], s, rtol=1e-12)


@settings(max_examples=15)
@given(st.floats(1e-4, 0.5), st.floats(0.0, 0.01))
def test_amdahl_fit_recovers_a_known_serial_fraction(serial, noise):
    p = sa.relative_size(REPLICAS)
    rng = np.random.default_rng(0)
    speed = sa.amdahl(p, serial) * (1 + noise * rng.standard_normal(p.size))
    fit = sa.fit_law("amdahl", p, speed)
    assert fit.law == "amdahl" and fit.points == len(REPLICAS)
    if noise == 0:
        assert fit.serial_fraction == pytest.approx(serial, rel=1e-6)
        assert fit.rms_residual < 1e-9
    else:
        assert fit.serial_fraction == pytest.approx(serial, rel=0.25, abs=2e-4)


def test_gustafson_fit_recovers_a_known_serial_fraction():
    p = sa.relative_size(REPLICAS)
    fit = sa.fit_law("gustafson", p, sa.gustafson(p, 0.2))
    assert fit.serial_fraction == pytest.approx(0.2, rel=1e-6)
    # Gustafson's efficiency 1 - s + s/p falls to 80 % where s (1 - 1/p) = 0.2: never
    # (s = 0.2 only approaches it); to 90 % at p = 1 / (1 - 0.1 / 0.2) = 2.
    exact = sa.Fit("gustafson", 0.2, 0.0, 0.0, 7)
    assert exact.efficiency_crossing(0.8) == math.inf
    assert exact.efficiency_crossing(0.9) == pytest.approx(2.0)
    assert fit.efficiency_crossing(0.9) == pytest.approx(2.0)


def test_amdahl_efficiency_crossing_is_where_the_law_says():
    fit = sa.Fit("amdahl", 0.01, 0.0, 0.0, 5)
    p80 = fit.efficiency_crossing(0.8)
    assert p80 == pytest.approx(1 + 0.25 / 0.01)  # 26
    assert sa.amdahl(np.array([p80]), 0.01)[0] / p80 == pytest.approx(0.8)
    assert sa.Fit("amdahl", 0.0, 0.0, 0.0, 5).efficiency_crossing(0.5) == math.inf


def test_a_single_point_is_not_fitted():
    assert sa.fit_law("amdahl", [1.0], [1.0]) is None


def test_first_below_and_fastest_growing_phase():
    assert sa.first_below([16, 64, 256], [1.0, 0.79, 0.4], 0.8) == 64
    assert sa.first_below([16, 64, 256], [1.0, 0.79, 0.4], 0.5) == 256
    assert sa.first_below([16, 64], [1.0, 0.9], 0.8) is None
    # compute stays at 1 s while the collective grows: its share grows, compute's falls.
    phases = [{"compute": 1.0, "allreduce": a, "host_sync": 0.1} for a in (0.1, 0.2, 0.4)]
    steps = [sum(ph.values()) for ph in phases]
    slopes = sa.phase_share_slopes([16, 32, 64], phases, steps)
    assert slopes["allreduce"] > 0 > slopes["compute"]
    assert sa.fastest_growing_phase(slopes) == "allreduce"
    assert sa.fastest_growing_phase({"compute": -0.1}) is None


@settings(max_examples=20, derandomize=True, deadline=None)
@given(st.floats(1e-4, 0.2), st.sampled_from(["amdahl", "gustafson"]))
def test_points_that_follow_the_law_are_a_good_fit(serial, law):
    p = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    speedup = sa.LAWS[law](p, serial)
    fit = sa.fit_law(law, p, speedup)
    assert not sa.poor_fit(fit, speedup)


def test_points_the_law_misses_are_flagged_and_their_crossings_not_stated():
    """A weak-scaling sweep whose speed-ups rise and then fall: no serial fraction makes
    Gustafson's straight line pass near them."""
    from popdist_emu.scaling._table import analyse_series

    p = [1, 2, 4, 8, 16]
    speedup = [1.0, 1.9, 2.9, 2.2, 1.4]
    fit = sa.fit_law("gustafson", p, speedup)
    assert sa.relative_rms_residual(fit, speedup) > sa.POOR_FIT_RELATIVE_RMS
    assert sa.poor_fit(fit, speedup)
    rows = [
        {
            "status": "ok",
            "replicas": n,
            "speedup": s,
            "efficiency": s / n,
            "phases": {"compute": 1e-3},
            "link_tiers": {},
            "simulated_step_seconds": 1e-3,
        }
        for n, s in zip(p, speedup, strict=True)
    ]
    analysis = analyse_series(rows, "gustafson")
    assert analysis["fit"]["poor"]
    assert all(v["fitted_replicas"] is None for v in analysis["efficiency_below"].values())
