"""Scaling analysis of a sweep: speed-up, efficiency, Karp-Flatt, Amdahl and Gustafson fits.

Pure functions on NumPy arrays (no JAX, no plotting). With ``N0`` the smallest replica count
of a series, ``p = N / N0`` its relative size and ``X(N)`` the simulated throughput:

- speed-up ``S(p) = X(N) / X(N0)`` (for a fixed global batch, the ratio of step times);
- parallel efficiency ``E(p) = S(p) / p``;
- the Karp-Flatt experimentally determined serial fraction
  ``e(p) = (1/S - 1/p) / (1 - 1/p)`` (undefined at ``p = 1``);
- Amdahl's law (strong scaling): ``S(p) = 1 / (s + (1 - s) / p)``;
- Gustafson's law (weak scaling, scaled speed-up): ``S(p) = p - s (p - 1)``.

The serial fraction ``s`` is fitted by bounded non-linear least squares
(``scipy.optimize.curve_fit``) on the speed-ups. A part of the step that stays constant, or
grows, as replicas are added (the collectives, host synchronisation) is what the memory and
performance guide calls a "constant or slowed-down process": :func:`fastest_growing_phase`
names the phase whose share of the step grows fastest with ``log2(replicas)``.

References:
    G. M. Amdahl, "Validity of the single processor approach to achieving large scale
    computing capabilities", AFIPS Spring Joint Computer Conference, 1967.
    J. L. Gustafson, "Reevaluating Amdahl's law", Communications of the ACM 31(5), 1988.
    A. H. Karp and H. P. Flatt, "Measuring parallel processor performance",
    Communications of the ACM 33(5), 1990.
    Graphcore, Memory and Performance Optimisation on the IPU, section 7 ("Scaling an
    application over multiple replicas"), 7.3 ("Constant or slowed-down processes
    (Amdahl's law)").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import curve_fit

EFFICIENCY_THRESHOLDS = (0.8, 0.5)


def speedups(replicas: ArrayLike, throughput: ArrayLike) -> np.ndarray:
    """``S = X(N) / X(N0)`` with ``N0`` the smallest replica count given."""
    n, x = np.asarray(replicas, float), np.asarray(throughput, float)
    return x / x[np.argmin(n)]


def relative_size(replicas: ArrayLike) -> np.ndarray:
    """``p = N / N0``: replicas relative to the smallest replica count given."""
    n = np.asarray(replicas, float)
    return n / n.min()


def efficiency(p: ArrayLike, speedup: ArrayLike) -> np.ndarray:
    """Parallel efficiency ``E = S / p``."""
    return np.asarray(speedup, float) / np.asarray(p, float)


def karp_flatt(p: ArrayLike, speedup: ArrayLike) -> np.ndarray:
    """Karp-Flatt serial fraction ``e = (1/S - 1/p) / (1 - 1/p)``; NaN where ``p = 1``.

    (Karp and Flatt, CACM 33(5), 1990.) A constant ``e`` over ``p`` points at a serial part
    (Amdahl); a growing ``e`` at overhead that grows with the replica count.
    """
    n, s = np.asarray(p, float), np.asarray(speedup, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 / s - 1.0 / n) / (1.0 - 1.0 / n)
    return np.where(n > 1, e, np.nan)


def amdahl(p: np.ndarray, s: float) -> np.ndarray:
    """Amdahl's speed-up on ``p`` times the resources with serial fraction ``s``."""
    return 1.0 / (s + (1.0 - s) / np.asarray(p, float))


def gustafson(p: np.ndarray, s: float) -> np.ndarray:
    """Gustafson's scaled speed-up on ``p`` times the resources with serial fraction ``s``."""
    p = np.asarray(p, float)
    return p - s * (p - 1.0)


LAWS = {"amdahl": amdahl, "gustafson": gustafson}


class Fit(NamedTuple):
    """A fitted scaling law.

    Attributes:
        law: ``"amdahl"`` or ``"gustafson"``.
        serial_fraction: the fitted ``s`` in [0, 1].
        stderr: its standard error from the fit's covariance (NaN with too few points).
        rms_residual: root-mean-square of ``S - S_fit`` over the points.
        points: how many points were fitted.
    """

    law: str
    serial_fraction: float
    stderr: float
    rms_residual: float
    points: int

    def predict(self, p: ArrayLike) -> np.ndarray:
        """The fitted speed-up at relative sizes ``p``."""
        return LAWS[self.law](np.asarray(p, float), self.serial_fraction)

    def efficiency_crossing(self, threshold: float) -> float:
        """The relative size ``p`` at which the fitted efficiency falls to ``threshold``.

        Amdahl: ``E = 1 / (s p + 1 - s)``, so ``p = 1 + (1/E - 1) / s``. Gustafson:
        ``E = 1 - s + s / p``, so ``p = 1 / (1 - (1 - E) / s)``, reached only if
        ``s > 1 - E``. ``inf`` when it is never reached.
        """
        s = self.serial_fraction
        if s <= 0:
            return math.inf
        if self.law == "amdahl":
            return 1.0 + (1.0 / threshold - 1.0) / s
        if s <= 1.0 - threshold + 1e-12:  # (rounding of 1 - threshold)
            return math.inf
        return 1.0 / (1.0 - (1.0 - threshold) / s)


def fit_law(law: str, p: ArrayLike, speedup: ArrayLike) -> Fit | None:
    """Least-squares fit of ``law``'s serial fraction to the speed-ups.

    Bounded to [0, 1] (``scipy.optimize.curve_fit`` with the trust-region reflective
    method). None with fewer than two points, where nothing can be fitted.
    """
    n, s = np.asarray(p, float), np.asarray(speedup, float)
    keep = np.isfinite(n) & np.isfinite(s)
    n, s = n[keep], s[keep]
    if n.size < 2 or np.unique(n).size < 2:
        return None
    (value,), cov = curve_fit(LAWS[law], n, s, p0=(0.01,), bounds=(0.0, 1.0))
    stderr = float(np.sqrt(cov[0, 0])) if np.isfinite(cov).all() else math.nan
    residual = s - LAWS[law](n, value)
    return Fit(law, float(value), stderr, float(np.sqrt(np.mean(residual**2))), int(n.size))


# A fit whose RMS residual exceeds this share of the mean speed-up does not describe the
# points: 5 % is well above the scatter of simulated points about a law that does (they
# follow it to rounding) and below the misses seen when a law does not apply (e.g. 0.85
# against speed-ups of 1 to 2.9, about 40 %).
POOR_FIT_RELATIVE_RMS = 0.05


def relative_rms_residual(fit: Fit, speedup: Sequence[float]) -> float:
    """The fit's RMS residual as a share of the mean speed-up it was fitted to."""
    values = [s for s in speedup if s is not None and np.isfinite(s)]
    mean = float(np.mean(values)) if values else 0.0
    return fit.rms_residual / mean if mean > 0 else math.inf


def poor_fit(fit: Fit, speedup: Sequence[float]) -> bool:
    """Whether the law misses the points by more than ``POOR_FIT_RELATIVE_RMS`` (RMS)."""
    return relative_rms_residual(fit, speedup) > POOR_FIT_RELATIVE_RMS


def first_below(replicas: Sequence[float], eff: Sequence[float], threshold: float) -> int | None:
    """The smallest replica count whose efficiency is below ``threshold`` (None if none)."""
    below = [int(n) for n, e in zip(replicas, eff, strict=True) if np.isfinite(e) and e < threshold]
    return min(below) if below else None


def phase_share_slopes(
    replicas: ArrayLike, phases: Sequence[Mapping[str, float]], steps: ArrayLike
) -> dict[str, float]:
    """Slope of each phase's share of the step per doubling of the replicas.

    Least-squares line (``numpy.polyfit``) of ``phase_seconds / step_seconds`` against
    ``log2(replicas)``; phases that are zero everywhere are left out.
    """
    x = np.log2(np.asarray(replicas, float))
    if x.size < 2 or np.unique(x).size < 2:
        return {}
    names = sorted({name for ph in phases for name in ph})
    slopes = {}
    for name in names:
        share = np.array([ph.get(name, 0.0) for ph in phases]) / np.asarray(steps, float)
        if np.any(share > 0):
            slopes[name] = float(np.polyfit(x, share, 1)[0])
    return slopes


def fastest_growing_phase(slopes: Mapping[str, float]) -> str | None:
    """The phase whose share grows fastest (None when no share grows)."""
    growing = {k: v for k, v in slopes.items() if v > 0}
    return max(growing, key=lambda name: growing[name]) if growing else None
