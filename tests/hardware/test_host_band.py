"""The host's share of a band: the spread of the measured CPU per sample, folded into the
model's band in quadrature where the host decides (or nearly decides) the throughput."""

import dataclasses
import math
import random

import pytest
from host_profiles import POD16, SMALL

import hardware
from hardware._host_band import BAND_COVERAGE_FACTOR, MAD_TO_SIGMA

SAMPLES_PER_INSTANCE = 2 * 16 * 4  # local replicas x micro-batch x accumulation


def _with_host(host_over_ipu: float, spread: float) -> hardware.StepSimulation:
    """SMALL with a loader whose time per step is ``host_over_ipu`` times the IPU step."""
    layout = hardware.ReplicaLayout(4, 2)
    ipu = hardware.simulate_step(SMALL, layout, POD16).simulated_step_seconds
    profile = dataclasses.replace(
        SMALL,
        host_cpu_seconds_per_sample=host_over_ipu * ipu / SAMPLES_PER_INSTANCE,
        host_cpu_relative_spread=spread,
    )
    return hardware.simulate_step(profile, layout, POD16)


def test_the_spread_is_the_scaled_mad_over_the_median():
    # median 3; absolute deviations 2, 1, 0, 1, 97: MAD 1, the outlier ignored
    assert hardware.relative_spread([1.0, 2.0, 3.0, 4.0, 100.0]) == pytest.approx(MAD_TO_SIGMA / 3)
    assert hardware.relative_spread([5.0, 5.0, 5.0]) == 0
    assert hardware.relative_spread([1.0, 2.0]) == 0  # too few to say anything


def test_the_spread_of_normal_timings_is_their_relative_standard_deviation():
    rng = random.Random(39)
    timings = [rng.gauss(100.0, 5.0) for _ in range(20_000)]
    assert hardware.relative_spread(timings) == pytest.approx(0.05, rel=0.05)


def test_quadrature_adds_independent_relative_uncertainties():
    assert hardware.combined_uncertainty(0.03, 0.04) == pytest.approx(0.05)
    assert hardware.combined_uncertainty(0.03, 0.0) == 0.03


def test_a_host_bound_band_widens_by_the_measured_spread():
    sim = _with_host(4.0, 0.10)
    assert sim.host_bound
    calibration = hardware.calibration_for(sim)
    model = calibration.relative_spread
    assert hardware.host_share(sim, model) == 0.10
    low, high = hardware.band_factors(calibration, 0.10)
    plain_low, plain_high = hardware.band_factors(calibration, 0.0)
    assert low < plain_low and high > plain_high
    width = hardware.host_half_width(calibration, 0.10)
    assert width == (0.10 * BAND_COVERAGE_FACTOR if calibration.cv_band else 0.10)
    assert (plain_high - 1, high - 1) == (
        pytest.approx(calibration.band(1.0)[1] - 1),
        pytest.approx(math.hypot(plain_high - 1, width)),
    )
    fast, slow = hardware.band_step_seconds((low, high), 2.0)
    assert (fast, slow) == (pytest.approx(2.0 / high), pytest.approx(2.0 / low))


def test_an_ipu_bound_step_far_from_the_host_keeps_the_models_band():
    sim = _with_host(0.1, 0.10)  # the host needs a tenth of the IPU step
    assert not sim.host_bound
    assert hardware.host_share(sim, hardware.calibration_for(sim).relative_spread) == 0


def test_an_ipu_bound_step_near_the_host_bound_carries_the_host_spread():
    sim = _with_host(0.95, 0.10)  # 5 % faster than the IPUs: a slower run turns host-bound
    assert not sim.host_bound
    assert hardware.host_share(sim, 0.0) == 0.10


def test_nearness_to_the_host_bound_is_judged_at_the_bands_coverage():
    # The host is 1/0.88 = 13.6 % faster than the IPUs: its spread of 10 % slows it within
    # reach only at an 80 % band's coverage (12.8 %), not at one standard deviation.
    sim = _with_host(0.88, 0.10)
    assert not sim.host_bound
    assert hardware.host_share(sim, 0.0) == 0
    assert hardware.host_share(sim, 0.0, BAND_COVERAGE_FACTOR) == 0.10


def test_an_unmeasured_spread_is_refused_when_negative_and_changes_nothing_when_zero():
    with pytest.raises(ValueError, match="host_cpu_relative_spread"):
        dataclasses.replace(SMALL, host_cpu_relative_spread=-0.1)
    assert hardware.host_share(_with_host(4.0, 0.0), 0.05) == 0


def test_the_host_spread_joins_an_80_percent_band_at_80_percent_coverage():
    """The cross-validated band is a central 80 % interval; the spread is one standard
    deviation (68 %). Scaled by the coverage factor, a host-only band holds 80 % of the
    throughputs of repeated runs whose host time scatters normally by that spread (a repeated
    host-bound run landed outside its peers' bands when the spread joined unscaled)."""
    calibration = dataclasses.replace(hardware.load_calibration(), cv_band=(1.0, 1.0))
    low, high = hardware.band_factors(calibration, 0.05)
    rng = random.Random(41)
    rates = [1 / rng.gauss(1.0, 0.05) for _ in range(20_000)]
    inside = sum(low <= r <= high for r in rates) / len(rates)
    assert inside == pytest.approx(0.80, abs=0.015)
    plain = dataclasses.replace(calibration, cv_band=())  # a 1 -/+ sigma band: unscaled
    assert hardware.host_half_width(plain, 0.05) == 0.05
