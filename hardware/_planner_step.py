"""The convolution planner's choices for one IPU's program: what they cost the step.

``hardware._planner`` plans one operation; this module plans all the matmuls and
convolutions of a step on one IPU and sums what the choices cost: cycles beyond the fastest
plans (compute time), the largest temporary memory (not-always-live), extra code and
exchange code (always-live, with no outlining between settings), and the worst tile.

References:
    Graphcore, "Optimising Temporary Memory Usage for Convolutions and Matmuls on the IPU"
    (technical note, docs.graphcore.ai/projects/available-memory), sections 1.2, 2.1 and 3.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Mapping

from hardware._parameters import (
    CODE_BYTES_PER_OP_PER_TILE,
    EXCHANGE_CODE_BYTES_PER_TILE,
    ModelParameters,
)
from hardware._planner import (
    DEFAULT_AVAILABLE_MEMORY_PROPORTION,
    ConvOp,
    PlannedOp,
    plan_op,
    proportion_for_ipu,
)
from hardware._specs import IpuSpec
from hardware._step_profile import StepProfile


@dataclasses.dataclass(frozen=True)
class PlannerReport:
    """The planner's choices for the matmuls and convolutions of one IPU's program.

    Attributes:
        planned: one ``PlannedOp`` per distinct (operation, setting), with ``counts``.
        counts: how many times each appears in the step.
        tiles: tiles of the IPU.
        clock_hz: the IPU's clock.
    """

    planned: tuple[PlannedOp, ...]
    counts: tuple[int, ...]
    tiles: int
    clock_hz: float

    @property
    def extra_seconds(self) -> float:
        """Seconds the chosen plans take beyond the fastest plans, per pass of the program.

        The roofline of ``hardware._compute``, calibrated on published throughput, stands
        for the fastest plans; the planner adds what its memory budget costs.
        ASSUMPTION: the fastest plans are what the calibrated efficiency describes.
        """
        cycles = sum(
            n * (p.plan.cycles - p.fastest.cycles)
            for p, n in zip(self.planned, self.counts, strict=True)
        )
        return cycles / self.clock_hz

    @property
    def temporary_bytes(self) -> int:
        """Peak temporary bytes of the IPU: the largest operation's over its tiles."""
        return max((p.plan.temporary_bytes * p.plan.tiles_used for p in self.planned), default=0)

    @property
    def worst_tile_temporary_bytes(self) -> int:
        """Temporary bytes of the worst tile of the worst operation."""
        return max((p.plan.temporary_bytes for p in self.planned), default=0)

    @property
    def code_bytes(self) -> int:
        """Vertex code the plans add to the IPU (see ``_extra_code``)."""
        return _extra_code(self.planned, "code_bytes", CODE_BYTES_PER_OP_PER_TILE * self.tiles)

    @property
    def exchange_code_bytes(self) -> int:
        """Exchange code the plans add to the IPU (see ``_extra_code``)."""
        return _extra_code(
            self.planned, "exchange_code_bytes", EXCHANGE_CODE_BYTES_PER_TILE * self.tiles
        )

    @property
    def worst_tile_excess_bytes(self) -> int:
        """Bytes the worst tile holds beyond the mean tile because of the plans' layouts.

        Weights are always live, so the excess of every weight's layout stacks on the first
        tiles: once per weight tensor (its operations with one ``weight_key``; the largest
        of their layouts), not once per operation that reads it. Inputs, outputs and a
        right-hand operand the step computes are live around their operation, so the
        largest single excess (with the operation's temporary memory above the mean) counts.
        ASSUMPTION: each operation lays its operands out from the IPU's first tile.
        """
        weights: dict[str, int] = {}
        transient = 0
        for p in self.planned:
            share = 1 / p.plan.tiles_used - 1 / self.tiles
            others = p.op.operand_bytes
            if p.op.weight_live:
                key = p.op.weight_key or p.op.name
                weights[key] = max(weights.get(key, 0), math.ceil(p.op.weight_bytes * share))
                others -= p.op.weight_bytes
            mean_temp = p.plan.temporary_bytes * p.plan.tiles_used / self.tiles
            transient = max(
                transient, math.ceil(others * share + p.plan.temporary_bytes - mean_temp)
            )
        return sum(weights.values()) + transient

    @property
    def phase_two(self) -> tuple[PlannedOp, ...]:
        """The operations forced into phase two (minimum memory)."""
        return tuple(p for p in self.planned if p.phase == 2)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Poplar's warning, once per operation forced into phase two."""
        return tuple(p.warning for p in self.phase_two if p.warning)

    def summary(self) -> dict:
        """JSON-ready figures for ``summary.json``."""
        return {
            "operations": int(sum(self.counts)),
            "distinct_operations": len(self.planned),
            "proportions": sorted({p.proportion for p in self.planned}),
            "phase_two_operations": [p.op.name for p in self.phase_two],
            "extra_compute_seconds": self.extra_seconds,
            "temporary_bytes": self.temporary_bytes,
            "worst_tile_temporary_bytes": self.worst_tile_temporary_bytes,
            "code_bytes": self.code_bytes,
            "exchange_code_bytes": self.exchange_code_bytes,
            "worst_tile_excess_bytes": self.worst_tile_excess_bytes,
        }


def _extra_code(planned: Iterable[PlannedOp], field: str, body: int) -> int:
    """Code beyond what ``hardware._memory`` already charges every operation.

    The memory model charges each operation the code of its fastest plan. A chosen plan
    with more stages (serial slicing, reduction) adds their code once per distinct
    operation and setting (otherwise equal operations share it by outlining); and, as the
    technical note warns, otherwise equal operations with different settings cannot be
    outlined: each setting beyond the first compiles its own body (``body`` plus its
    stages' code). ASSUMPTION: one outlined body per signature and setting.
    """
    variants: dict[tuple, dict[float, PlannedOp]] = {}
    for p in planned:
        variants.setdefault(p.op.signature, {})[p.proportion] = p
    total = 0
    for settings in variants.values():
        for i, p in enumerate(settings.values()):
            total += max(getattr(p.plan, field) - getattr(p.fastest, field), 0)
            if i > 0:
                total += body + getattr(p.plan, field)
    return int(total)


def plan_step(
    ops: Iterable[ConvOp],
    ipu: IpuSpec,
    proportion: float | Mapping[str, float] = DEFAULT_AVAILABLE_MEMORY_PROPORTION,
    *,
    sync_cycles: float = 0.0,
    ipu_index: int = 0,
) -> PlannerReport:
    """Plans every operation of one IPU's program.

    Args:
        ops: the step's matmuls and convolutions (repeats allowed: counted once per plan).
        ipu: the IPU.
        proportion: a float, or PopTorch's per-IPU mapping ``{"IPU0": 0.6, ...}``.
        sync_cycles: cycles of one compute set's synchronisation.
        ipu_index: which IPU of the replica this program runs on (for the mapping).
    """
    amp = proportion_for_ipu(proportion, ipu_index)
    counts = Counter(ops)
    planned, numbers = [], []
    for op, n in sorted(counts.items(), key=lambda kv: kv[0].name):
        planned.append(plan_op(op, ipu, amp, float(sync_cycles)))
        numbers.append(n)
    return PlannerReport(tuple(planned), tuple(numbers), ipu.tiles, ipu.clock_hz)


def plan_profile(
    profile: StepProfile,
    ipu: IpuSpec,
    parameters: ModelParameters | None = None,
    *,
    ipu_index: int = 0,
    ops: Iterable[ConvOp] | None = None,
) -> PlannerReport:
    """The planner's choices for a ``StepProfile``'s matmuls and convolutions on ``ipu``.

    The sync cycles of a compute set are the calibrated compute-set cost (no new free
    parameter); ``parameters`` default to the calibrated ones. ``ops`` replaces the
    profile's own operations (a pipeline stage's, planned with the replica's setting for
    IPU ``ipu_index``).
    """
    from hardware._parameters import load_parameters

    params = parameters if parameters is not None else load_parameters()
    return plan_step(
        profile.matmuls if ops is None else ops,
        ipu,
        profile.available_memory_proportion,
        sync_cycles=params.compute_set_seconds * ipu.clock_hz,
        ipu_index=ipu_index,
    )
