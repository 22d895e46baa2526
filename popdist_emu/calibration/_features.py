"""A row's step as data: the expensive simulation once, then any parameters in microseconds.

Refitting the model's free parameters without a row (cross-validation) or with a user's own
measurements must not compile a program again. A row's simulated step is, term by term, an
affine function of the fitted parameters in their physical basis: the arithmetic time is
FLOPs over peak times ``1 / compute_efficiency`` and ``1 / matmul_efficiency``; the latency
terms are counts (ring steps over IPU-Links and GW-Links, compute sets, host calls) times
``ipu_link_latency``, ``gw_link_latency``, ``compute_set_seconds``, ``host_sync_seconds`` and
``multi_ipu_sync_seconds``. So each row's step is probed once at the calibrated parameters
and once per parameter moved by ``PROBE_FACTOR`` in that basis (:func:`probe_points`, all
from one compiled program: ``contract.SweepPoint.parameters``), which gives its
coefficients (:func:`features_from_probes`): the count each parameter multiplies, and the
seconds none touches. Where the step takes a maximum (a pipeline's slowest stage, host
compute against the IPUs, collectives hidden behind compute) the form is the first-order
expansion around the calibrated values; a further probe with every parameter moved at once
measures how far that is from the model (``linearity_error``), and the fit's results are
checked against full simulations at the fitted values.

References:
    Hastie, Tibshirani and Friedman, "The Elements of Statistical Learning", 2nd ed.,
    section 7.10 (cross-validation needs many refits, hence a cheap one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

import hardware

# The fitted parameters the features cover, in their order (hardware.FITTED_PARAMETERS).
TERMS = tuple(hardware.FITTED_PARAMETERS)
# Efficiencies enter the step as their inverse (seconds per FLOP); the rest as themselves.
INVERSE = frozenset({"compute_efficiency", "matmul_efficiency"})
PROBE_FACTOR = 1.5  # each probe moves one term's basis value by this factor
JOINT_FACTOR = 1.25  # the linearity check moves every term's at once by this one
ZERO_PROBE = 0.05  # the basis value a probe gives a term that is 0 at the base (seconds)


def basis(values: Mapping[str, float]) -> np.ndarray:
    """The terms' values in the step's affine basis: ``1 / efficiency`` or seconds."""
    return np.array([1.0 / values[t] if t in INVERSE else values[t] for t in TERMS])


def from_basis(u: np.ndarray) -> dict[str, float]:
    """The parameter values whose basis is ``u``."""
    return {t: float(1.0 / v if t in INVERSE else v) for t, v in zip(TERMS, u, strict=True)}


def probe_points(base: Mapping[str, float]) -> list[dict[str, float]]:
    """The parameter values a row's step is simulated at: ``base``, then each term's basis
    value moved by ``PROBE_FACTOR`` (to ``ZERO_PROBE`` where it is 0), then every term's by
    ``JOINT_FACTOR`` (the linearity check)."""
    u0 = basis(base)
    points = [dict(base)]
    for k in range(len(TERMS)):
        u = u0.copy()
        u[k] = u[k] * PROBE_FACTOR if u[k] > 0 else ZERO_PROBE
        points.append(from_basis(u))
    joint = np.where(u0 > 0, u0 * JOINT_FACTOR, ZERO_PROBE)
    points.append(from_basis(joint))
    return points


class RowFeatures(NamedTuple):
    """A row's step in the affine basis: ``constant + coefficients . basis(parameters)``
    seconds for ``samples_per_step`` samples.

    Attributes:
        constant: seconds no fitted term touches (datasheet bandwidths, memory traffic).
        coefficients: seconds per unit of each term's basis value (``TERMS``' order): FLOPs
            over peak for the efficiencies, counts (ring steps, compute sets, host calls)
            for the latencies.
        samples_per_step: samples of the whole job per step.
        linearity_error: the affine form's relative step error at the joint probe.
    """

    constant: float
    coefficients: tuple[float, ...]
    samples_per_step: float
    linearity_error: float = 0.0

    def step_seconds(self, values: Mapping[str, float]) -> float:
        """The row's step at the parameter ``values``."""
        return self.constant + float(np.dot(self.coefficients, basis(values)))

    def term_seconds(self, values: Mapping[str, float]) -> dict[str, float]:
        """The step at the parameter ``values`` by what produced its seconds: each term's
        (its coefficient times its basis value) and ``"constant"``, which no term touches."""
        parts = np.array(self.coefficients) * basis(values)
        return {"constant": self.constant, **dict(zip(TERMS, parts.tolist(), strict=True))}

    def samples_per_second(self, values: Mapping[str, float]) -> float:
        """The row's throughput at the parameter ``values``."""
        return self.samples_per_step / self.step_seconds(values)

    def to_json(self) -> dict:
        """The record ``benchmarks/row_features.json`` stores."""
        return {
            "constant": self.constant,
            "coefficients": dict(zip(TERMS, self.coefficients, strict=True)),
            "samples_per_step": self.samples_per_step,
            "linearity_error": round(self.linearity_error, 6),
        }

    @classmethod
    def from_json(cls, record: Mapping) -> RowFeatures:
        """The features a stored record holds (a term it lacks weighs 0)."""
        coefficients = record["coefficients"]
        return cls(
            float(record["constant"]),
            tuple(float(coefficients.get(t, 0.0)) for t in TERMS),
            float(record["samples_per_step"]),
            float(record.get("linearity_error", 0.0)),
        )


def features_from_probes(
    points: Sequence[Mapping[str, float]], steps: Sequence[float], samples_per_step: float
) -> RowFeatures:
    """A row's features from its step seconds at ``probe_points``' values (same order)."""
    if len(points) != len(TERMS) + 2 or len(steps) != len(points):
        raise ValueError(f"expected {len(TERMS) + 2} probes, got {len(points)} and {len(steps)}")
    u0, t0 = basis(points[0]), float(steps[0])
    coefficients = []
    for k in range(len(TERMS)):
        du = basis(points[k + 1])[k] - u0[k]
        coefficients.append((float(steps[k + 1]) - t0) / du)
    constant = t0 - float(np.dot(coefficients, u0))
    features = RowFeatures(constant, tuple(coefficients), float(samples_per_step))
    joint = features.step_seconds(points[-1])
    return features._replace(linearity_error=joint / float(steps[-1]) - 1.0)
