"""The host's share of a prediction's band: the spread of the measured CPU per sample.

A report's band (``hardware._uncertainty``) is the hardware model's cross-validated error; the
host's part of a step is not modelled but measured, on whatever machine ran the program, and
on a shared machine the same loader's CPU per sample moves from run to run (caches, hyper-
threads and frequency shared with other work, which ``time.thread_time`` does not remove).
So the measurement keeps, beside its central figure, its spread across the batches it timed
(:func:`relative_spread`), and a run the host decides, or nearly decides, carries it in its
band (:func:`host_share`, :func:`combined`).

The spread is the scaled median absolute deviation of the per-batch timings over their
median: the batches time the same work, so their scatter is the machine's noise during the
run, which is what differs between runs; the median and MAD ignore a batch or two that paid
a first call or lost its core for a while (Rousseeuw and Croux 1993; NIST/SEMATECH
e-Handbook of Statistical Methods, section 1.3.5.6, "Measures of Scale",
https://www.itl.nist.gov/div898/handbook/eda/section3/eda356.htm). The factor 1.4826 makes
the MAD estimate one standard deviation of normally distributed timings, the scale of a
calibration's ``1 -/+ sigma`` band; a cross-validated band is wider (80 %), and the spread
is scaled to it where the two meet (below).

The model's error and the host's are independent (one is the fit's residual on published
rows, the other this machine's noise), so a band that carries both adds their relative
uncertainties in quadrature (root-sum-of-squares): JCGM 100:2008, "Evaluation of
measurement data - Guide to the expression of uncertainty in measurement" (GUM), section
5.1.2, https://www.bipm.org/en/doc/publications/guides/gum.html. Both must be at the same
coverage first: the cross-validated band is a central 80 % interval, and one standard
deviation covers only 68 % of normal timings, so the host's spread joins it multiplied by
the coverage factor of a central 80 % interval, the normal distribution's 90th percentile
(GUM, section 6.2 and annex G, expanded uncertainty; :func:`host_half_width`). A throughput
inversely proportional to the host's time has, to first order, the same relative
uncertainty.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from hardware._step_simulation import StepSimulation
from hardware._uncertainty import Calibration

# 1 / Phi^-1(3/4): the MAD of normally distributed values times this is their standard
# deviation (NIST/SEMATECH e-Handbook, section 1.3.5.6).
MAD_TO_SIGMA = 1.4826
# Timings below which a spread says nothing: three are the fewest with a median apart from
# its extremes.
MIN_TIMINGS = 3
# The coverage factor of a central 80 % interval of a normal distribution: Phi^-1(0.9).
BAND_COVERAGE_FACTOR = statistics.NormalDist().inv_cdf(0.9)


def relative_spread(timings: Sequence[float]) -> float:
    """The scaled median absolute deviation of ``timings`` over their median: one standard
    deviation of a timing, as a fraction (0 for fewer than ``MIN_TIMINGS`` timings or a
    median of 0: nothing to estimate from)."""
    if len(timings) < MIN_TIMINGS:
        return 0.0
    median = statistics.median(timings)
    if median <= 0:
        return 0.0
    mad = statistics.median(abs(t - median) for t in timings)
    return MAD_TO_SIGMA * mad / median


def host_share(sim: StepSimulation, model_sigma: float, coverage: float = 1.0) -> float:
    """The host's relative spread where it moves the throughput, else 0.

    A host-bound step's throughput is the host-bound rate, so its measured spread applies; an
    IPU-bound step whose host-bound rate, slowed by its spread at the band's coverage, comes
    within the model's band (half-width ``model_sigma``) of the IPU-bound rate may turn
    host-bound on another run, so it applies too; a step far from host-bound (or whose host
    was not measured) keeps the model's band alone. ``coverage`` puts the spread (one
    standard deviation) at the coverage of ``model_sigma``: ``host_half_width(calibration,
    1.0)``, 1 for a ``1 -/+ sigma`` band."""
    spread = sim.profile.host_cpu_relative_spread
    host = sim.host_bound_samples_per_second
    if spread <= 0 or not math.isfinite(host):
        return 0.0
    if sim.host_bound or host * (1 - coverage * spread) <= sim.ipu_bound_samples_per_second * (
        1 + model_sigma
    ):
        return spread
    return 0.0


def combined(model: float, host: float) -> float:
    """Root-sum-of-squares of two independent relative uncertainties (GUM, 5.1.2)."""
    return math.hypot(model, host)


def host_half_width(calibration: Calibration, host: float) -> float:
    """The host's relative spread ``host`` (one standard deviation) at the coverage of the
    calibration's band: times :data:`BAND_COVERAGE_FACTOR` for the 80 % cross-validated band,
    unchanged for the ``1 -/+ sigma`` band of a calibration without one."""
    return host * BAND_COVERAGE_FACTOR if calibration.cv_band else host


def band_factors(calibration: Calibration, host: float) -> tuple[float, float]:
    """``(low, high)`` factors of a predicted throughput: the calibration's band
    (:meth:`Calibration.factors`), each side widened in quadrature by the host's relative
    spread ``host`` at the band's coverage (:func:`host_half_width`; 0: the calibration's
    band unchanged)."""
    low, high = calibration.factors()
    width = host_half_width(calibration, host)
    return 1 - combined(1 - low, width), 1 + combined(high - 1, width)
