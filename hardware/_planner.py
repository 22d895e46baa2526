"""PopLibs' convolution planner under ``availableMemoryProportion``: memory traded for cycles.

Every matmul and convolution is implemented by PopLibs as a convolution, and the convolution
planner chooses how to split it over the IPU's tiles and into serial sub-operations. Each
candidate plan has two estimated metrics: cycles, and temporary (not-always-live) memory on
its worst tile. Phase one picks the plan with the fewest cycles among those whose temporary
memory fits within ``availableMemoryProportion x tile memory`` (default 0.6); if none fits,
phase two picks the plan with the least temporary memory and Poplar warns
``convolution planner unable to meet memory target. Optimising for minimum memory.``

The model of one operation (``ConvOp``: ``groups`` independent products of an
``rows x reduction`` by ``reduction x columns`` matrix, a convolution's output field being
its rows and its kernel window times input channels its reduction) enumerates two splits:

- the serial split ``s`` (1, 2, 4, ...): the output is computed in ``s`` sequential steps,
  halving the output channels of a step first and then its rows (PopLibs' serial splits);
- the reduction split ``c`` (1, 2, 4, ...): within a step, ``c`` groups of tiles each
  reduce ``1/c`` of the reduction dimension into their own partial sums, which are then
  reduced across tiles. As in the 2.5D matrix multiplication of Solomonik and Demmel, the
  ``c`` copies of the partials cost ``c`` times the memory and cut the operand exchange per
  tile by ``sqrt(c)``; for each ``s`` the planner keeps the ``c`` with the fewest cycles.

Per step, each used tile computes an output block of ``o`` elements, ``rows_t x cols_t``
(shaped to minimise the operands it receives), over ``k = reduction / c`` products:

- temporary memory (worst tile) = partials ``o x partials_bytes`` (float partials, PopLibs'
  default ``partialsType``, unless half is asked for; a reduction runs in place)
  + the received operand slices ``(rows_t x k x depth/reduction + k x cols_t) x dtype``;
- cycles = ``s x waves x (o k / m + exchanged bytes / x + reduction + sets x sync)`` with
  ``m`` MACs per tile per cycle (peak FLOP/s / (2 tiles clock)), ``x`` exchange bytes per
  tile per cycle (47 TB/s over the tiles at the clock), the reduction of ``c`` partials at
  exchange speed, and ``sync`` the cycles of one compute set (the calibrated compute-set
  cost): 2 compute sets a step (exchange, compute), 2 more for a reduction;
- tile balance: a step never gives a tile less than one AMP output group (``AMP_GROUP``
  output elements), so heavily serialised plans use few tiles, and the operation's operands
  (inputs, weights, outputs), which PopLibs lays out over the tiles that use them, pile onto
  those tiles: the worst tile holds ``operands / tiles used`` instead of the mean;
- code: each halving of a step (``log2 s``) adds a slicing stage and a reduction split adds
  a reduction stage, each with vertex code and exchange code on every tile (the note's
  "more steps to execute and, consequently, more compute and exchange code").

Everything is pure, deterministic and cached; lowering the proportion shrinks the feasible
set, so it never lowers the chosen plan's cycles nor raises its temporary memory.

References:
    Graphcore, "Optimising Temporary Memory Usage for Convolutions and Matmuls on the IPU"
    (technical note, docs.graphcore.ai/projects/available-memory): the planner's two
    metrics and two phases, the budget as a proportion of tile memory, the default 0.6,
    the warning text, tile imbalance at very small values, extra code of conservative
    plans, and no outlining between otherwise equal operations with different settings.
    PopLibs API reference, ``poplin`` convolution and matmul options
    (``availableMemoryProportion``, ``partialsType``).
    Solomonik and Demmel, "Communication-optimal parallel 2.5D matrix multiplication and LU
    factorization algorithms", Euro-Par 2011 (memory copies against communication).
    Graphcore, "Memory and Performance Optimisation on the IPU", section 2.1 (about 47 TB/s
    of exchange within an IPU).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from hardware._parameters import CODE_BYTES_PER_OP_PER_TILE, EXCHANGE_CODE_BYTES_PER_TILE
from hardware._specs import IpuSpec

DEFAULT_AVAILABLE_MEMORY_PROPORTION = 0.6
PLANNER_WARNING = "convolution planner unable to meet memory target. Optimising for minimum memory."
# PopLibs' partialsType and the bytes of one partial sum; the default is float.
PARTIALS_TYPES = {"float": 4, "half": 2}
PARTIALS_BYTES = PARTIALS_TYPES["float"]
# Exchange within an IPU, "about 47 TB/s" (Memory and Performance Optimisation, section 2.1).
EXCHANGE_BYTES_PER_SECOND = 47e12
# Output elements of one AMP pass: a tile's smallest share of a step (16 output channels for
# half inputs, 8 for float, as the AMP conv-partial vertices group them). UNCONFIRMED.
AMP_GROUP = {2: 16, 4: 8}
# The largest serial split considered (2**20 steps): beyond it no plan saves more memory.
MAX_SERIAL_LOG2 = 20


@dataclasses.dataclass(frozen=True)
class ConvOp:
    """One matmul or convolution as the planner sees it.

    Attributes:
        name: where it comes from (the primitive and its position), for warnings.
        kind: ``"matmul"`` or ``"conv"``.
        groups: independent products (a batched matmul's batch, a grouped convolution's
            groups).
        rows: output rows of one group (a convolution's batch x output field).
        columns: output columns of one group (output channels per group).
        reduction: products summed into one output (input channels x kernel window).
        depth: input elements per row a tile receives for the full reduction (input
            channels per group; equals ``reduction`` for a matmul).
        dtype_bytes: bytes of one input element (2 for half, 4 for float).
        partials_bytes: bytes of one partial sum: 4 (PopLibs' default ``partialsType``
            float) or 2 (half partials, as Graphcore's fp16 ResNet-50 configurations set).
        available_memory_proportion: a per-operation setting (PopTorch's
            ``set_available_memory``), or None for the IPU's.
        weight_live: whether the right-hand operand is a model weight, live all step
            (False: a value the step computes, such as an activation gradient, live only
            around the operation).
        weight_key: which weight it is: operations with the same key (a forward
            convolution, its recomputation, a matmul's data gradient) use one tensor,
            laid out once; "" when unknown (the operand is its own tensor).
    """

    name: str
    kind: str
    groups: int
    rows: int
    columns: int
    reduction: int
    depth: int
    dtype_bytes: int = 2
    available_memory_proportion: float | None = None
    partials_bytes: int = PARTIALS_BYTES
    weight_live: bool = True
    weight_key: str = ""

    def __post_init__(self) -> None:
        for field in (
            "groups",
            "rows",
            "columns",
            "reduction",
            "depth",
            "dtype_bytes",
            "partials_bytes",
        ):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ConvOp `{field}` must be a positive int, got {value!r}.")
        if self.available_memory_proportion is not None:
            check_proportion(self.available_memory_proportion)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the operation."""
        return self.groups * self.rows * self.columns * self.reduction

    @property
    def operand_bytes(self) -> int:
        """Bytes of its input, weights and output."""
        g, b = self.groups, self.dtype_bytes
        return (
            g
            * b
            * (self.rows * self.depth + self.reduction * self.columns + self.rows * self.columns)
        )

    @property
    def weight_bytes(self) -> int:
        """Bytes of its right-hand operand (its weights when ``weight_live``)."""
        return self.groups * self.dtype_bytes * self.reduction * self.columns

    @property
    def signature(self) -> tuple:
        """What makes two operations share code when their plans agree (outlining)."""
        return (
            self.kind,
            self.groups,
            self.rows,
            self.columns,
            self.reduction,
            self.depth,
            self.dtype_bytes,
            self.partials_bytes,
        )


class Plan(NamedTuple):
    """One candidate plan of an operation.

    Attributes:
        serial_split: sequential steps of the operation.
        reduction_split: tile groups that each reduce part of the reduction dimension.
        tiles_used: tiles the plan computes on (and lays its operands out over).
        temporary_bytes: temporary memory of its worst tile.
        cycles: estimated cycles of the whole operation.
        code_bytes: vertex code per IPU beyond an unsplit plan's.
        exchange_code_bytes: exchange code per IPU beyond an unsplit plan's.
    """

    serial_split: int
    reduction_split: int
    tiles_used: int
    temporary_bytes: int
    cycles: float
    code_bytes: int
    exchange_code_bytes: int


class PlannedOp(NamedTuple):
    """The planner's choice for one operation.

    Attributes:
        op: the operation.
        plan: the chosen plan.
        fastest: the fastest plan of all (what an unlimited budget would choose).
        proportion: the available memory proportion it was planned with.
        budget_bytes: proportion x tile memory.
        phase: 1 (fastest within budget) or 2 (minimum memory: nothing fitted).
        worst_tile_operand_bytes: operand bytes on the worst tile under the plan.
        mean_tile_operand_bytes: operand bytes per tile spread over all tiles.
    """

    op: ConvOp
    plan: Plan
    fastest: Plan
    proportion: float
    budget_bytes: int
    phase: int
    worst_tile_operand_bytes: int
    mean_tile_operand_bytes: int

    @property
    def warning(self) -> str | None:
        """Poplar's phase-two warning naming the operation, or None in phase one."""
        if self.phase == 1:
            return None
        return f"PL:POPLIN [W] Warning: {PLANNER_WARNING} (operation {self.op.name})"


def check_proportion(value: object) -> float:
    """``value`` as an available memory proportion, or a one-line ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError(
            f"available memory proportion must be a number in (0, 1], got {value!r}: it is "
            "the share of tile memory for temporary values (default 0.6)."
        )
    return float(value)


def _pow2_upto(n: int) -> np.ndarray:
    return 2 ** np.arange(0, max(int(n), 1).bit_length())


def candidate_plans(op: ConvOp, ipu: IpuSpec, sync_cycles: float) -> tuple[Plan, ...]:
    """The plans of ``op`` on ``ipu``, one per serial split, in order of serialisation.

    For each serial split the reduction split with the fewest cycles is kept (see the module
    docstring for the formulas). Operations of one signature share their plans.
    """
    return _candidates(op.signature, ipu, float(sync_cycles))


@functools.lru_cache(maxsize=65536)
def _candidates(signature: tuple, ipu: IpuSpec, sync_cycles: float) -> tuple[Plan, ...]:
    _, groups, rows, columns, reduction, depth, b, pb = signature
    op = ConvOp("plan", "matmul", groups, rows, columns, reduction, depth, b, None, pb)
    tiles = ipu.tiles
    grain = AMP_GROUP.get(b, 8)
    macs_per_cycle = ipu.peak_flops("float16" if b <= 2 else "float32") / (2 * tiles * ipu.clock_hz)
    exchange_per_cycle = EXCHANGE_BYTES_PER_SECOND / (tiles * ipu.clock_hz)
    group_tiles = max(tiles // min(op.groups, tiles), 1)
    waves = math.ceil(op.groups / tiles)
    area = op.rows * op.columns
    serial = _pow2_upto(min(max(area // grain, 1), 2**MAX_SERIAL_LOG2))
    splits = _pow2_upto(min(group_tiles, max(op.reduction // grain, 1)))
    s, c = np.meshgrid(serial.astype(float), splits.astype(float), indexing="ij")
    # Serialise over output channels first, then over rows.
    col_steps = np.minimum(s, op.columns)
    cols_step = np.ceil(op.columns / col_steps)
    rows_step = np.ceil(op.rows / np.maximum(s / op.columns, 1.0))
    out_step = rows_step * cols_step
    used = np.maximum(np.minimum(np.floor(group_tiles / c), np.ceil(out_step / grain)), 1.0)
    o = np.ceil(out_step / used)
    k = op.reduction / c
    depth_per_k = op.depth / op.reduction
    # Output block rows_t x cols_t = o minimising rows_t*k*depth_per_k + k*cols_t.
    rows_t = np.clip(np.sqrt(o / depth_per_k), 1.0, rows_step)
    cols_t = np.clip(o / rows_t, 1.0, cols_step)
    rows_t = o / cols_t
    received = (rows_t * np.maximum(k * depth_per_k, 1.0) + k * cols_t) * b
    reducing = c > 1
    partials = o * op.partials_bytes
    temporary = np.ceil(partials + received)
    step_cycles = (
        o * k / macs_per_cycle
        + received / exchange_per_cycle
        + np.where(reducing, 2 * o * op.partials_bytes * (c - 1) / c / exchange_per_cycle, 0.0)
        + np.where(reducing, 4, 2) * sync_cycles
    )
    cycles = waves * s * step_cycles
    best = np.argmin(cycles, axis=1)
    plans = []
    for i, j in enumerate(best):
        stages = round(math.log2(s[i, j])) + int(reducing[i, j])
        plans.append(
            Plan(
                serial_split=int(s[i, j]),
                reduction_split=int(c[i, j]),
                tiles_used=int(min(op.groups, tiles) * used[i, j] * c[i, j]),
                temporary_bytes=int(temporary[i, j]),
                cycles=float(cycles[i, j]),
                code_bytes=stages * CODE_BYTES_PER_OP_PER_TILE * tiles,
                exchange_code_bytes=stages * EXCHANGE_CODE_BYTES_PER_TILE * tiles,
            )
        )
    return tuple(plans)


@functools.lru_cache(maxsize=65536)
def plan_op(
    op: ConvOp,
    ipu: IpuSpec,
    proportion: float = DEFAULT_AVAILABLE_MEMORY_PROPORTION,
    sync_cycles: float = 0.0,
) -> PlannedOp:
    """Poplar's two phases for ``op``: the fastest plan within budget, else the smallest.

    ``proportion`` is the IPU's setting; the operation's own setting, when it has one, wins.
    Ties are broken towards less memory, then less serialisation, so the choice is unique.
    """
    amp = check_proportion(
        op.available_memory_proportion if op.available_memory_proportion is not None else proportion
    )
    plans = candidate_plans(op, ipu, float(sync_cycles))
    budget = int(amp * ipu.sram_per_tile)
    fastest = min(plans, key=lambda p: (p.cycles, p.temporary_bytes, p.serial_split))
    within = [p for p in plans if p.temporary_bytes <= budget]
    if within:
        chosen = min(within, key=lambda p: (p.cycles, p.temporary_bytes, p.serial_split))
        phase = 1
    else:
        # Phase two disregards cycles: least worst-tile memory, then least in total (the
        # most serialised plan, on the fewest tiles).
        chosen = min(
            plans, key=lambda p: (p.temporary_bytes, p.temporary_bytes * p.tiles_used, p.cycles)
        )
        phase = 2
    return PlannedOp(
        op=op,
        plan=chosen,
        fastest=fastest,
        proportion=amp,
        budget_bytes=budget,
        phase=phase,
        worst_tile_operand_bytes=math.ceil(op.operand_bytes / chosen.tiles_used),
        mean_tile_operand_bytes=math.ceil(op.operand_bytes / ipu.tiles),
    )


def proportion_for_ipu(proportion: float | Mapping[str, float], ipu_index: int = 0) -> float:
    """The proportion of IPU ``ipu_index`` from a float or ``{"IPU0": 0.6, ...}``.

    IPUs the mapping leaves out keep the default 0.6, as in PopTorch.
    """
    if isinstance(proportion, Mapping):
        for key, value in proportion.items():
            if not (isinstance(key, str) and key.startswith("IPU") and key[3:].isdigit()):
                raise ValueError(
                    f"available memory proportion key {key!r} is not an IPU name: use "
                    "{'IPU0': 0.6, 'IPU1': 0.4, ...} as PopTorch's setAvailableMemoryProportion."
                )
            check_proportion(value)
        return float(proportion.get(f"IPU{ipu_index}", DEFAULT_AVAILABLE_MEMORY_PROPORTION))
    return check_proportion(proportion)
