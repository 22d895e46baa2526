"""A family's closed-form fit: two trial runs give a row's terms, and the fit recovers the
parameters that made the rows."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popdist_emu import calibration

PARAMETER_RELATIVE = 1e-6
ROUNDING = {"predicted_samples_per_second": 0.05, "leave_one_out_predicted": 0.05}
ROUNDING |= {"error": 5e-5, "leave_one_out_error": 5e-5}


def _rows(terms, published):
    return [
        calibration.FamilyRow(f"r{i}", "pod16", 4, 96, p, calibration.StepTerms(*t))
        for i, (t, p) in enumerate(zip(terms, published, strict=True))
    ]


@given(
    a=st.floats(0.05, 5.0),
    b=st.floats(0.0, 1.0),
    eta=st.floats(0.1, 0.7),
    sync=st.floats(1e-4, 0.5),
)
def test_two_trial_runs_give_the_terms_of_the_closed_form(a, b, eta, sync):
    efficiencies = calibration.trial_efficiencies(eta)

    def seconds(efficiency):
        return a / efficiency + b + sync

    steps = (seconds(efficiencies[0]), seconds(efficiencies[1]))
    terms = calibration.solve_step_terms(steps, efficiencies, sync, 64.0)
    assert terms.a == pytest.approx(a, rel=1e-6)
    assert terms.b == pytest.approx(b, abs=1e-6 * (a / eta + b + sync))
    assert terms.samples_per_step == 64.0


def test_the_fit_finds_the_parameters_that_made_the_rows_and_predicts_them_exactly():
    terms = [(1.2, 0.3, 2048.0), (0.6, 0.2, 4096.0), (2.4, 0.1, 1024.0), (0.9, 0.4, 3072.0)]
    published = calibration.predict_family([calibration.StepTerms(*t) for t in terms], 0.42, 0.11)
    fit = calibration.calibrate_family(_rows(terms, published), shared_efficiency=0.3)
    assert fit.parameters == pytest.approx({"compute_efficiency": 0.42, "host_sync_seconds": 0.11})
    np.testing.assert_allclose(fit.predicted, published, rtol=1e-9)
    np.testing.assert_allclose(fit.leave_one_out, published, rtol=1e-6)
