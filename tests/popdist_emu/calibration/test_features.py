"""A row's step as features: probes of an affine step give back its coefficients exactly,
and a step that takes a maximum shows as a linearity error."""

import numpy as np
import pytest

import hardware
from popdist_emu import calibration
from popdist_emu.calibration import _features

BASE = hardware.load_parameters().to_json()
# Seconds per unit of each term's basis value, in TERMS' order: FLOPs over peak for the
# efficiencies, counts (ring steps, host calls, compute sets) for the latencies.
TRUE = dict(
    compute_efficiency=0.02,
    ipu_link_latency=30.0,
    gw_link_latency=4.0,
    host_sync_seconds=1.0,
    compute_set_seconds=7e4,
    matmul_efficiency=0.05,
    multi_ipu_sync_seconds=1.0,
)


def affine_step(values):
    return 0.003 + float(np.dot([TRUE[t] for t in calibration.TERMS], _features.basis(values)))


def test_probes_of_an_affine_step_give_its_coefficients_exactly():
    points = calibration.probe_points(BASE)
    assert len(points) == len(calibration.TERMS) + 2 and points[0] == BASE
    features = calibration.features_from_probes(points, [affine_step(p) for p in points], 3200)
    assert features.coefficients == pytest.approx([TRUE[t] for t in calibration.TERMS], rel=1e-9)
    assert features.constant == pytest.approx(0.003, rel=1e-6)
    assert abs(features.linearity_error) < 1e-12
    moved = {**BASE, "compute_efficiency": 0.2, "gw_link_latency": 5e-3}
    assert features.samples_per_second(moved) == pytest.approx(3200 / affine_step(moved))
    assert calibration.RowFeatures.from_json(features.to_json()) == features


def test_a_maximum_in_the_step_shows_as_a_linearity_error():
    def step(values):  # the host's 0.05 s against the IPU's arithmetic: whichever is longer
        return max(0.05, 0.02 / values["compute_efficiency"]) + values["host_sync_seconds"]

    points = calibration.probe_points({**BASE, "compute_efficiency": 0.5})  # host-bound
    features = calibration.features_from_probes(points, [step(p) for p in points], 100)
    assert abs(features.linearity_error) > 1e-3


def test_a_term_at_zero_is_probed_at_a_fixed_value():
    points = calibration.probe_points({**BASE, "multi_ipu_sync_seconds": 0.0})
    k = calibration.TERMS.index("multi_ipu_sync_seconds")
    assert points[k + 1]["multi_ipu_sync_seconds"] == _features.ZERO_PROBE
    with pytest.raises(ValueError, match="expected 9 probes"):
        calibration.features_from_probes(points[:3], [1.0] * 3, 1)


def test_a_step_s_seconds_split_by_term_add_up_to_the_step():
    points = calibration.probe_points(BASE)
    features = calibration.features_from_probes(points, [affine_step(p) for p in points], 3200)
    parts = features.term_seconds(BASE)
    assert set(parts) == {"constant", *calibration.TERMS}
    assert sum(parts.values()) == pytest.approx(features.step_seconds(BASE), rel=1e-12)
    assert parts["constant"] == pytest.approx(0.003, rel=1e-6)
    # An efficiency's seconds are its FLOPs over peak divided by the efficiency.
    assert parts["matmul_efficiency"] == pytest.approx(0.05 / BASE["matmul_efficiency"])
    assert parts["compute_set_seconds"] == pytest.approx(7e4 * BASE["compute_set_seconds"])
