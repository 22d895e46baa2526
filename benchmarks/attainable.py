"""How close any step-time model fitted to the calibration rows can come to a check row.

The issue's targets ask for every validation row within 10 % of its published figure while
the calibration rows stay within 2 %. Whether that is possible does not depend on the
model's details, only on the published figures, for rows that share the calibration rows'
IPU, model and micro-batch (MLPerf Training v1.0's ResNet-50 rows on the same Mk2 Pods as
the v1.1 calibration, micro-batch 20): the step of a data-parallel replica with one IPU is

    T = GA x u + F_pod

seconds, with ``u`` the time of one micro-batch (the same on every Pod: the same IPU runs
the same micro-batch) and ``F_pod`` >= 0 what a weight update costs on that Pod and replica
count (the all-reduce, the update, the host's part), no smaller on a larger Pod (the
all-reduce spans more IPUs and more links), and the same for a check row as for the
calibration row on its Pod with its replicas. That last is an assumption: MLPerf v1.0's
Pod64 run had 16 host processes where v1.1's had 32, so a model with a limit on each
process's throughput could slow it, with a limit no calibration row reaches and so none can
fit. A row's throughput is ``replicas x micro-batch x GA / T``. ``hardware`` is such a
model, as is any model whose step is affine in the gradient accumulation. Each calibration
row within the tolerance bounds its ``T`` on both sides; the smallest and largest throughput
a check row can then be given are two linear programs. A check row whose published figure
lies outside that range by more than the target cannot be met by any such model without
moving a calibration row past its tolerance. Rows on other IPUs or micro-batches are not
bounded, and not printed.

Prints one JSON line per check row that shares a calibration row's IPU and micro-batch,
then one line with the tolerance.

Run::

    python benchmarks/attainable.py [--tolerance 0.02]

References:
    Dantzig, "Linear Programming and Extensions", Princeton, 1963; scipy.optimize.linprog's
    HiGHS solvers (Huangfu and Hall, "Parallelizing the dual revised simplex method",
    Math. Prog. Comp. 10, 2018).
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Sequence
from typing import NamedTuple

import calibration_set
import numpy as np
import published_rows  # this folder's: the rows and their published figures
from results_file import write_results
from scipy.optimize import linprog

import hardware
from popdist_emu import arguments


class Bounds(NamedTuple):
    """The throughput range a check row can be given, and how near it comes."""

    low: float  # items per second (0: no lower bound)
    high: float  # items per second (inf: no upper bound)
    published: float

    @property
    def nearest_error(self) -> float:
        """The attainable relative error nearest zero (0 where the figure is in range)."""
        if self.published < self.low:
            return self.low / self.published - 1
        if self.published > self.high:
            return self.high / self.published - 1
        return 0.0


def _pod(row: published_rows.Row) -> tuple[str, int]:
    return row.system, row.replicas


def _items(row: published_rows.Row) -> float:
    """Items one step of the whole job processes."""
    return row.replicas * row.micro_batch * row.gradient_accumulation


def attainable(
    check: published_rows.Row, calibration: Sequence[published_rows.Row], tolerance: float
) -> Bounds:
    """The range of ``check``'s throughput over every model ``T = GA x u + F_pod`` (``u`` > 0,
    ``F_pod`` >= 0, non-decreasing with the replicas) that predicts each of ``calibration``
    within ``tolerance``; all rows on one IPU with one micro-batch.

    Raises:
        ValueError: no such model exists (the calibration rows contradict one another).
    """
    pods = sorted({_pod(r) for r in (*calibration, check)}, key=lambda p: p[1])
    column = {pod: 1 + i for i, pod in enumerate(pods)}  # variable 0 is u
    n = 1 + len(pods)
    a_ub, b_ub = [], []
    for row in calibration:  # lo <= GA u + F <= hi
        coeffs = np.zeros(n)
        coeffs[0], coeffs[column[_pod(row)]] = row.gradient_accumulation, 1.0
        a_ub += [coeffs, -coeffs]
        b_ub += [
            _items(row) / ((1 - tolerance) * row.published),
            -_items(row) / ((1 + tolerance) * row.published),
        ]
    for smaller, larger in itertools.pairwise(pods):  # F_small <= F_large
        coeffs = np.zeros(n)
        coeffs[column[smaller]], coeffs[column[larger]] = 1.0, -1.0
        a_ub.append(coeffs)
        b_ub.append(0.0)
    objective = np.zeros(n)
    objective[0], objective[column[_pod(check)]] = check.gradient_accumulation, 1.0
    step = []
    for sign in (1.0, -1.0):  # the shortest and the longest step
        result = linprog(sign * objective, A_ub=np.array(a_ub), b_ub=b_ub, bounds=(0, None))
        if result.status == 2:
            raise ValueError(
                f"no step model T = GA u + F fits {[r.key for r in calibration]} within "
                f"{tolerance:.1%}: raise --tolerance."
            )
        step.append(sign * result.fun if result.status == 0 else math.inf)
    shortest, longest = step
    high = _items(check) / shortest if shortest > 0 else math.inf
    return Bounds(_items(check) / longest, high, check.published)


def bounded_rows(rows: Sequence[published_rows.Row], tolerance: float) -> list[dict]:
    """Each check row's bounds from the calibration rows on its IPU with its micro-batch."""
    ipu = {row.system: hardware.get_system(row.system).ipu.name for row in rows}
    out = []
    fitted = calibration_set.calibration_keys()
    for check in (r for r in rows if r.key not in fitted):
        calibration = [
            r
            for r in rows
            if r.key in fitted
            and ipu[r.system] == ipu[check.system]
            and r.micro_batch == check.micro_batch
        ]
        if not calibration:
            continue
        bounds = attainable(check, calibration, tolerance)
        out.append(
            {
                "row": check.key,
                "system": check.system,
                "gradient_accumulation": check.gradient_accumulation,
                "published": check.published,
                "attainable_low": round(bounds.low, 1),
                "attainable_high": round(bounds.high, 1),
                "nearest_error": round(bounds.nearest_error, 4),
                "calibration_rows": [
                    f"{r.system} GA {r.gradient_accumulation}" for r in calibration
                ],
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.02,
        help="how far each calibration row may be from its figure (default 0.02: the issue's bar)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.tolerance < 1:
        parser.error(f"--tolerance {args.tolerance}: give a fraction in [0, 1), e.g. 0.02")
    try:
        rows = bounded_rows(published_rows.ROWS, args.tolerance)
    except ValueError as error:
        print(f"attainable.py: {error}", file=sys.stderr)
        return 2
    for row in rows:
        print(json.dumps(row))
    print(json.dumps({"tolerance": args.tolerance, "rows": len(rows)}))
    write_results("attainable", {"tolerance": args.tolerance, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
