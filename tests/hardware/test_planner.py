"""The convolution planner model: Poplar's two phases, its warning, and what they feed."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware
from hardware._planner import (
    DEFAULT_AVAILABLE_MEMORY_PROPORTION,
    PLANNER_WARNING,
    ConvOp,
    candidate_plans,
    plan_op,
    proportion_for_ipu,
)
from hardware._planner_step import plan_step

IPU = hardware.GC200
SYNC = 930.0  # cycles of one compute set, about the calibrated 0.7 us at 1.33 GHz

ops = st.builds(
    ConvOp,
    name=st.just("op"),
    kind=st.sampled_from(["matmul", "conv"]),
    groups=st.sampled_from([1, 1, 4, 32]),
    rows=st.integers(1, 200_000),
    columns=st.integers(1, 4096),
    reduction=st.integers(1, 20_000),
    depth=st.integers(1, 4096),
    dtype_bytes=st.sampled_from([2, 4]),
)
proportions = st.floats(0.001, 1.0)


def _plan(op, amp):
    return plan_op(op, IPU, amp, SYNC)


@settings(derandomize=True, deadline=None, max_examples=40)
@given(op=ops, a=proportions, b=proportions)
def test_lowering_the_proportion_never_raises_memory_nor_lowers_cycles(op, a, b):
    high, low = _plan(op, max(a, b)), _plan(op, min(a, b))
    assert low.plan.temporary_bytes <= high.plan.temporary_bytes
    assert low.plan.cycles >= high.plan.cycles
    # Always-live code and exchange code never shrink as the proportion falls.
    assert low.plan.code_bytes >= high.plan.code_bytes
    assert low.plan.exchange_code_bytes >= high.plan.exchange_code_bytes


@settings(derandomize=True, deadline=None, max_examples=40)
@given(op=ops, a=proportions)
def test_phase_one_fits_the_budget_and_is_the_fastest_that_does(op, a):
    chosen = _plan(op, a)
    plans = candidate_plans(op, IPU, SYNC)
    budget = int(a * IPU.sram_per_tile)
    if chosen.phase == 1:
        assert chosen.plan.temporary_bytes <= budget
        assert chosen.plan.cycles == min(p.cycles for p in plans if p.temporary_bytes <= budget)
        assert chosen.warning is None
    else:
        assert all(p.temporary_bytes > budget for p in plans)
        assert chosen.plan.temporary_bytes == min(p.temporary_bytes for p in plans)


@settings(derandomize=True, deadline=None, max_examples=30)
@given(op=ops)
def test_below_the_smallest_plan_the_warning_appears_and_memory_stops_falling(op):
    smallest = min(p.temporary_bytes for p in candidate_plans(op, IPU, SYNC))
    below = smallest / IPU.sram_per_tile / 2
    if below <= 0 or below > 1:
        return
    a, b = _plan(op, below), _plan(op, below / 2)
    assert a.phase == b.phase == 2
    assert PLANNER_WARNING in a.warning and op.name in a.warning
    assert a.plan == b.plan  # nothing falls any more
    assert a.plan.temporary_bytes == smallest


@settings(derandomize=True, deadline=None, max_examples=40)
@given(op=ops, a=proportions)
def test_the_worst_tile_is_never_below_the_mean_tile(op, a):
    chosen = _plan(op, a)
    assert chosen.worst_tile_operand_bytes >= chosen.mean_tile_operand_bytes
    assert 1 <= chosen.plan.tiles_used <= IPU.tiles


def test_warning_text_is_poplars():
    assert PLANNER_WARNING == (
        "convolution planner unable to meet memory target. Optimising for minimum memory."
    )
    op = ConvOp("conv #7", "conv", 1, 20 * 56 * 56, 64, 576, 64)
    warned = _plan(op, 0.0001)
    assert warned.phase == 2
    assert warned.warning == (
        "PL:POPLIN [W] Warning: convolution planner unable to meet memory target. "
        "Optimising for minimum memory. (operation conv #7)"
    )


def test_very_low_proportions_pile_operands_onto_few_tiles():
    op = ConvOp("conv", "conv", 1, 20 * 56 * 56, 256, 576, 64)
    default, tiny = _plan(op, DEFAULT_AVAILABLE_MEMORY_PROPORTION), _plan(op, 0.0001)
    assert default.plan.tiles_used == IPU.tiles
    assert tiny.plan.tiles_used < IPU.tiles // 10
    assert tiny.worst_tile_operand_bytes > 10 * default.worst_tile_operand_bytes
    report = plan_step([op], IPU, 0.0001, sync_cycles=SYNC)
    assert report.worst_tile_excess_bytes > 0
    assert plan_step([op], IPU, 0.6, sync_cycles=SYNC).worst_tile_excess_bytes == 0


def test_a_weight_read_by_several_operations_is_laid_out_once():
    # A convolution on few tiles (a tiny proportion): its weights pile onto the first tiles.
    op = ConvOp("forward", "conv", 1, 20 * 56 * 56, 256, 576, 64, weight_key="w")
    again = dataclasses.replace(op, name="recomputed")  # the same weight, read again

    def excess(*planned):
        return plan_step(planned, IPU, 0.0001, sync_cycles=SYNC).worst_tile_excess_bytes

    one = excess(op)
    assert one > 0 and excess(op, again) == one
    # Unknown identity: each operation's right-hand operand is a weight of its own.
    assert excess(*(dataclasses.replace(o, weight_key="") for o in (op, again))) > one
    # Right-hand operands the step computes (weight gradients') are live only around their
    # operation: the largest counts, they do not stack as weights do.
    computed = [dataclasses.replace(op, name=f"c{i}", weight_live=False) for i in range(2)]
    assert excess(op, *computed) == excess(op, computed[0])
    others = [dataclasses.replace(c, weight_live=True, weight_key=c.name) for c in computed]
    assert excess(op, *others) > excess(op, others[0])


def test_a_per_operation_setting_wins_and_costs_code_it_cannot_share():
    op = ConvOp("a", "matmul", 1, 4096, 1024, 1024, 1024)
    twin = dataclasses.replace(op, name="b")
    shared = plan_step([op, twin], IPU, 0.6, sync_cycles=SYNC)
    override = dataclasses.replace(twin, available_memory_proportion=0.05)
    split = plan_step([op, override], IPU, 0.6, sync_cycles=SYNC)
    assert sorted(p.proportion for p in split.planned) == [0.05, 0.6]
    assert split.code_bytes > shared.code_bytes
    assert split.exchange_code_bytes > shared.exchange_code_bytes


def test_per_ipu_mapping_in_poptorchs_spelling():
    assert proportion_for_ipu({"IPU0": 0.3, "IPU1": 0.5}, 1) == 0.5
    assert proportion_for_ipu({"IPU0": 0.3}, 2) == DEFAULT_AVAILABLE_MEMORY_PROPORTION
    with pytest.raises(ValueError, match="IPU name"):
        proportion_for_ipu({"ipu0": 0.3})
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        proportion_for_ipu(1.5)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        hardware.StepProfile(grad_flops=1.0, grad_bytes_accessed=1.0, available_memory_proportion=0)


def _profile(amp, matmuls):
    return hardware.StepProfile(
        grad_flops=4e11,
        grad_bytes_accessed=4e10,
        parameter_bytes=50_000_000,
        activation_bytes=100_000_000,
        num_ops=600,
        micro_batch_size=16,
        precision="float16",
        matmuls=tuple(matmuls),
        available_memory_proportion=amp,
    )


def test_the_plans_feed_compute_time_temporaries_code_and_the_worst_tile():
    matmuls = [ConvOp(f"c{i}", "conv", 1, 16 * 56 * 56, 256, 2304, 256) for i in range(4)]
    layout = hardware.ReplicaLayout(num_replicas=1, num_instances=1, hosts=("h",))
    system = hardware.get_system("pod16")
    sims = {a: hardware.simulate_step(_profile(a, matmuls), layout, system) for a in (0.6, 0.05)}
    fast, slow = sims[0.6], sims[0.05]
    assert slow.phases["compute"] > fast.phases["compute"]
    assert slow.memory.categories["temporaries"] < fast.memory.categories["temporaries"]
    assert slow.memory.categories["exchange_code"] > fast.memory.categories["exchange_code"]
    assert fast.memory.worst_tile >= fast.memory.per_tile
    bare = hardware.simulate_step(_profile(0.6, []), layout, system)
    assert fast.memory.categories["temporaries"] >= bare.memory.categories["temporaries"]
