"""The pipeline schedule: time bounds, the ramp formula, stash depths, per-IPU memory, OOM."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hardware
from hardware._pipeline import stash_bytes

PARAMS = hardware.ModelParameters(
    compute_efficiency=0.25, ipu_link_latency=5e-6, gw_link_latency=1e-3, host_sync_seconds=5e-4
)
LINK = 160e9

stage_times = st.lists(
    st.tuples(st.floats(1e-5, 1e-2), st.floats(1e-5, 2e-2), st.integers(0, 10_000_000)),
    min_size=1,
    max_size=6,
)


def cost(ipu, forward, backward, **fields):
    """A stage priced at the given seconds (what the schedule takes)."""
    stage = hardware.StageProfile(ipu, (fields.pop("name", f"B{ipu}"),), **fields)
    return hardware.StageCost(stage, forward, backward)


def stages_of(times):
    return [
        cost(i, f, b, output_bytes=o if i < len(times) - 1 else 0)
        for i, (f, b, o) in enumerate(times)
    ]


@settings(max_examples=40)
@given(times=stage_times, ga=st.integers(1, 40), strategy=st.sampled_from(["pipelined", "sharded"]))
def test_step_is_between_busiest_ipu_and_all_work(times, ga, strategy):
    stages = stages_of(times)
    pipe = hardware.schedule_pipeline(stages, ga, strategy=strategy, link_bandwidth=LINK)
    busiest = max(pipe.busy_seconds)
    transfers = sum(
        2 * ga * (s.output_bytes / LINK) for s in stages if s.output_bytes > 0
    )  # each boundary: activations down and gradients up, per micro-batch
    assert pipe.seconds >= busiest * (1 - 1e-12)
    assert pipe.seconds <= (sum(pipe.busy_seconds) + transfers) * (1 + 1e-12)
    assert 0.0 <= pipe.bubble_fraction < 1.0
    assert pipe.balance >= 1.0 - 1e-12


@settings(max_examples=25)
@given(n=st.integers(1, 8), ga=st.integers(1, 64), f=st.floats(1e-5, 1e-2), r=st.floats(1, 3))
def test_balanced_bubble_is_the_ramp_formula_and_falls_with_accumulation(n, ga, f, r):
    stages = [cost(i, f, r * f) for i in range(n)]
    pipe = hardware.schedule_pipeline(stages, ga, link_bandwidth=LINK)
    assert pipe.bubble_fraction == pytest.approx(hardware.ramp_bubble_fraction(n, ga), abs=1e-9)
    assert pipe.seconds == pytest.approx((ga + n - 1) * (1 + r) * f)
    more = hardware.schedule_pipeline(stages, 2 * ga, link_bandwidth=LINK)
    assert more.bubble_fraction <= pipe.bubble_fraction + 1e-12
    if n > 1:
        assert more.bubble_fraction < pipe.bubble_fraction


@given(n=st.integers(2, 16))
def test_stash_depth_follows_the_stage_position(n):
    grouped = [hardware.stash_depth(s, n, "pipelined") for s in range(n)]
    assert grouped == [2 * (n - s) + 1 for s in range(n)]  # 2N+1, 2(N-1)+1, ...
    assert all(hardware.stash_depth(s, n, "pipelined", "interleaved") == n + 1 for s in range(n))
    assert all(hardware.stash_depth(s, n, "sharded") == 1 for s in range(n))
    # One stage is no pipeline: each micro-batch's backward follows its forward.
    assert {hardware.stash_depth(0, 1, s, o) for s, o in itertools.product(
        ("pipelined", "sharded"), ("grouped", "interleaved")
    )} == {1}  # fmt: skip
    stage = hardware.StageProfile(0, ("B",), input_bytes=10, activation_bytes=1000)
    full = stash_bytes(stage, 0, n, "pipelined")
    recomputed = stash_bytes(stage, 0, n, "pipelined", recomputation=True)
    assert full == (2 * n + 1) * 1000 and recomputed == (2 * n + 1) * 10 + 1000
    checkpointed = stage._replace(checkpoint_bytes=300)  # block checkpoints + one block
    assert (
        stash_bytes(checkpointed, 0, n, "pipelined", recomputation=True) == (2 * n + 1) * 10 + 300
    )


@given(n=st.integers(1, 6), ga=st.integers(1, 12), shared=st.booleans())
def test_program_order_runs_every_pass_once_after_its_inputs(n, ga, shared):
    ipus = [k // 2 for k in range(n)] if shared else None  # two stages per IPU
    for strategy in ("pipelined", "sharded"):
        done = set()
        for _, s, kind, m in hardware.program_order(n, ga, strategy, ipus):
            if kind == "forward":
                assert s == 0 or (s - 1, "forward", m) in done
            else:
                assert (s, "forward", m) in done
                assert s == n - 1 or (s + 1, "backward", m) in done
            done.add((s, kind, m))
        assert len(done) == 2 * n * ga


# Graphcore's BERT-Base at layers_per_ipu [0, 4, 4, 4]: a stage per block (AutoIncrement),
# the embeddings on IPU 0, four encoder layers on each of IPUs 1-3, pooler and heads on IPU 0.
BERT_IPUS = (0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 0, 0)


def test_consecutive_stages_on_one_ipu_share_a_slot_and_its_stash_depth():
    """PopART runs consecutive stages on one IPU in one pipeline cycle: BERT's 15 stages are
    5 slots, so the embeddings stash 2 x 5 + 1 micro-batches, not 2 x 15 + 1."""
    assert hardware.pipeline_slots(BERT_IPUS) == (0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4)
    assert hardware.pipeline_slots((0, 1, 2, 3, 0)) == (0, 1, 2, 3, 4)  # wrap-round: 5 slots
    n = len(BERT_IPUS)
    depths = [hardware.stash_depth(s, n, "pipelined", ipus=BERT_IPUS) for s in range(n)]
    assert depths == [11, 9, 9, 9, 9, 7, 7, 7, 7, 5, 5, 5, 5, 3, 3]
    assert hardware.stash_depth(3, n, "pipelined", "interleaved", BERT_IPUS) == 5 + 1
    with pytest.raises(ValueError, match="3 IPUs given for 15 stages"):
        hardware.stash_depth(0, n, "pipelined", ipus=(0, 1, 2))
    # The memory model counts them so: four encoder stages on IPU 1, 9 inputs each.
    stages = tuple(
        hardware.StageProfile(ipu, (f"B{k}",), input_bytes=1_000, activation_bytes=10)
        for k, ipu in enumerate(BERT_IPUS)
    )
    model = hardware.ReplicaModel(
        _profile(gradient_accumulation=64, recomputation=True), stages, "pipelined"
    )
    layout = hardware.ReplicaLayout(num_replicas=1, ipus_per_replica=4)
    memory = hardware.replica_memory(model, layout, hardware.get_system("pod16"))
    assert memory[1].categories["activations"] == 4 * 9 * 1_000 + 10


@settings(max_examples=20)
@given(groups=st.lists(st.integers(1, 3), min_size=2, max_size=5), ga=st.integers(9, 24))
def test_a_slots_stages_run_as_one_stage_of_their_summed_passes(groups, ga):
    """Stages sharing an IPU back to back take the time of one stage with their summed
    passes, ramp included (a slot is one pipeline stage to PopART)."""
    ipus = [g for g, size in enumerate(groups) for _ in range(size)]
    split = [
        cost(ipu, 1e-3 * (k + 1), 2e-3, name=f"B{k}", output_bytes=0) for k, ipu in enumerate(ipus)
    ]
    merged = [
        cost(g, sum(s.forward_seconds for s in split if s.ipu == g), 2e-3 * size, output_bytes=0)
        for g, size in enumerate(groups)
    ]
    one = hardware.schedule_pipeline(split, ga, link_bandwidth=LINK)
    other = hardware.schedule_pipeline(merged, ga, link_bandwidth=LINK)
    assert one.seconds == pytest.approx(other.seconds)
    order = hardware.program_order(len(ipus), ga, "pipelined", ipus)
    assert max(c for c, *_ in order) + 1 == ga + 2 * len(groups) - 1


placements = st.lists(st.integers(0, 3), min_size=1, max_size=7).map(
    lambda ipus: [sorted(set(ipus)).index(i) for i in ipus]  # every IPU 0..N-1 holds a stage
)


@settings(max_examples=40)
@given(
    ipus=placements,
    ga=st.integers(1, 12),
    strategy=st.sampled_from(["pipelined", "sharded"]),
    data=st.data(),
)
def test_stages_on_any_ipu_never_overlap_and_run_after_their_inputs(ipus, ga, strategy, data):
    """Stages on any IPU, several on one (the wrap-round of Graphcore's BERT): an IPU runs one
    pass at a time, every pass starts after the passes it needs, the step lies between the
    busiest IPU's work and all the work, and exchanges happen only between IPUs."""
    times = data.draw(st.lists(st.floats(1e-5, 1e-2), min_size=len(ipus), max_size=len(ipus)))
    stages = [
        cost(ipu, t, 2 * t, name=f"B{k}", output_bytes=1_000 * (k < len(ipus) - 1))
        for k, (ipu, t) in enumerate(zip(ipus, times, strict=True))
    ]
    pipe = hardware.schedule_pipeline(stages, ga, strategy=strategy, link_bandwidth=LINK)
    passes = [e for e in pipe.events if e.kind != "transfer"]
    assert len(passes) == 2 * len(stages) * ga
    for ipu in pipe.ipus:
        mine = sorted((e.start, e.start + e.duration) for e in passes if e.ipu == ipu)
        assert all(a[1] <= b[0] * (1 + 1e-12) + 1e-15 for a, b in itertools.pairwise(mine))
    end = {(e.stage, e.kind, e.micro_batch): e.start + e.duration for e in passes}
    k = len(stages)
    for e in passes:
        before = [(e.stage - 1, "forward")] if e.kind == "forward" and e.stage else []
        if e.kind == "backward":
            before = [(e.stage, "forward")] + (
                [(e.stage + 1, "backward")] if e.stage < k - 1 else []
            )
        for stage, kind in before:
            assert end[(stage, kind, e.micro_batch)] <= e.start * (1 + 1e-12) + 1e-15
    busy = pipe.busy_seconds
    assert len(busy) == len(set(ipus))
    assert sum(busy) == pytest.approx(ga * sum(3 * t for t in times))
    crossings = sum(a != b for a, b in itertools.pairwise(ipus))
    assert max(busy) * (1 - 1e-12) <= pipe.seconds
    assert pipe.seconds <= (sum(busy) + pipe.transfer_seconds) * (1 + 1e-12)
    if crossings == 0:
        assert pipe.transfer_seconds == 0
    assert {e.ipu for e in pipe.events if e.kind == "transfer"} <= set(pipe.ipus)


POD16 = hardware.get_system("pod16")


def simulate(stages, layout, profile=None, strategy="pipelined", **kwargs):
    """The one simulate_step, of a replica of ``stages`` run with ``strategy``."""
    model = hardware.ReplicaModel(profile or _profile(), tuple(stages), strategy)
    return hardware.simulate_step(model, layout, POD16, **kwargs)


def test_an_ipu_holds_the_stash_weights_and_code_of_all_its_stages():
    """Three stages on two IPUs, the last wrapping round to IPU 0: IPU 0 stashes stage 0's
    2K+1 = 7 entries and stage 2's 3, holds both stages' weights, and one working set."""
    stages = tuple(s._replace(ipu=ipu) for s, ipu in zip(_stages(3), (0, 1, 0), strict=True))
    layout = hardware.ReplicaLayout(4, 2, ipus_per_replica=2)
    sim = simulate(stages, layout, parameters=PARAMS)
    report = sim.pipeline
    ipu0, ipu1 = report.ipu_memory
    assert ipu0.categories["activations"] == (7 + 3) * 1_000_000
    assert ipu1.categories["activations"] == 5 * 1_000_000
    assert ipu0.categories["weights"] == 2 * ipu1.categories["weights"]
    assert ipu0.categories["code"] == 2 * ipu1.categories["code"]
    assert ipu0.categories["temporaries"] == ipu1.categories["temporaries"]
    assert report.stage_memory == (ipu0, ipu1, ipu0)
    assert report.stash_bytes == (7_000_000, 5_000_000, 3_000_000)
    assert report.stages_on(0) == (0, 2) and sim.memory == ipu0
    # One counter per IPU, back to its always-live bytes when the update's passes end.
    assert set(report.counters) == {0, 1}
    assert report.counters[0][-1][1] == ipu0.always_live
    assert max(b for _, b in report.counters[0]) <= ipu0.total
    big = tuple(s._replace(activation_bytes=150_000_000) if s.ipu == 0 else s for s in stages)
    oom = simulate(big, layout, parameters=PARAMS)
    with pytest.raises(
        hardware.OutOfMemoryError, match=r"^Out of memory: IPU 0 \(stages 0 and 2: B0, B2\)"
    ):
        hardware.check_memory(oom)


def test_minimum_gradient_accumulation():
    assert hardware.min_gradient_accumulation(4, "pipelined") == 7
    assert hardware.min_gradient_accumulation(1, "pipelined") == 1
    assert hardware.min_gradient_accumulation(4, "sharded") == 1
    layout = hardware.ReplicaLayout(4, 2, ipus_per_replica=4)
    with pytest.raises(ValueError, match="PopTorch needs it >= the 7 pipeline stages"):
        simulate(_stages(4), layout, _profile(gradient_accumulation=6))
    assert simulate(_stages(4), layout, _profile(gradient_accumulation=6), "sharded")


def _profile(**kw):
    base = dict(
        grad_flops=1e9,
        grad_bytes_accessed=1e8,
        parameter_bytes=4_000_000,
        optimiser_state_bytes=8_000_000,
        gradient_bytes=4_000_000,
        host_bytes_per_micro_batch=100_000,
        micro_batch_size=4,
        gradient_accumulation=8,
        collectives=(hardware.CollectiveRecord("all_reduce", "clockwise_ring", "all", 4_000_000),),
        name="toy",
    )
    return hardware.StepProfile(**{**base, **kw})


# A pass of 1e7 FLOPs and 1e5 bytes, and its twice as large backward: a few microseconds.
FORWARD = hardware.PassCounts(1e7, 1e5, 0.0, 40)
BACKWARD = hardware.PassCounts(2e7, 2e5, 0.0, 60)


def _stages(n, activation=1_000_000):
    return tuple(
        hardware.StageProfile(
            i,
            (f"B{i}",),
            FORWARD,
            BACKWARD,
            output_bytes=50_000 if i < n - 1 else 0,
            input_bytes=50_000,
            activation_bytes=activation,
            parameter_bytes=1_000_000,
            optimiser_state_bytes=2_000_000,
            gradient_bytes=1_000_000,
        )
        for i in range(n)
    )


def test_pipelined_step_memory_per_ipu_and_trace_tracks():
    layout = hardware.ReplicaLayout(4, 2, ipus_per_replica=4)
    sim = simulate(_stages(4), layout, parameters=PARAMS)
    report = sim.pipeline
    stashes = report.stash_bytes
    assert stashes == tuple((2 * (4 - s) + 1) * 1_000_000 for s in range(4))
    assert sim.memory == report.stage_memory[0]  # the first IPU stashes the most
    tracks = {e.track for e in sim.events}
    assert {hardware.ipu_track(i) for i in range(4)} <= tracks
    forwards = [e for e in sim.events if e.track == hardware.ipu_track(2) and e.name[0] == "F"]
    assert len(forwards) == 8
    assert sim.simulated_step_seconds > report.schedule.seconds
    recomputed = simulate(_stages(4), layout, _profile(recomputation=True), parameters=PARAMS)
    assert recomputed.memory.total < sim.memory.total


def test_out_of_memory_names_the_ipu_stage_and_remedies():
    layout = hardware.ReplicaLayout(4, 2, ipus_per_replica=2)
    sim = simulate(_stages(2, activation=200_000_000), layout)
    with pytest.raises(hardware.OutOfMemoryError) as err:
        hardware.check_memory(sim)
    text = str(err.value)
    assert text.startswith("Out of memory: IPU 0 (stage 0: B0)")
    assert "moving blocks of stage 0 to IPU 1" in text and "--recompute" in text
    assert "--ipus-per-replica 4" in text


def test_stage_count_must_match_the_replica():
    layout = hardware.ReplicaLayout(4, 2, ipus_per_replica=4)
    with pytest.raises(ValueError, match=r"2 stages on IPUs \[0, 1\] for 4 IPUs per replica"):
        simulate(_stages(2), layout)
    with pytest.raises(ValueError, match="runs one program on IPU 0"):
        hardware.ReplicaModel(_profile(), _stages(2))


def test_compute_sets_make_small_steps_cost_microseconds_each():
    ipu = hardware.GC200
    tiny = hardware.compute_seconds(1e3, 1e3, 0, ipu, "float32", PARAMS, compute_sets=100)
    assert tiny >= 100 * PARAMS.compute_set_seconds
    fp16 = hardware.compute_seconds(1e12, 0, 0, ipu, "float16", PARAMS)
    fp32 = hardware.compute_seconds(1e12, 0, 0, ipu, "float32", PARAMS)
    assert fp32 / fp16 == pytest.approx(ipu.peak_fp16_flops / ipu.peak_fp32_flops)


def test_a_stages_matmuls_are_planned_on_its_ipu_and_can_overflow_its_fullest_tile():
    """Each stage's matmuls are planned with its IPU's proportion: at a tiny one on IPU 1 the
    serialised plans pile operands onto few tiles, so IPU 1 is refused on its fullest tile
    although its total fits, and the message says which; IPU 0 is planned as before."""
    big = hardware.ConvOp("conv", "conv", 1, 20 * 56 * 56, 256, 576, 64)
    stages = tuple(
        s._replace(backward=s.backward._replace(matmuls=(big,)), backward_reruns_forward=True)
        for s in _stages(2)
    )
    layout = hardware.ReplicaLayout(4, 2, ipus_per_replica=2)

    def planned(proportion):
        profile = _profile(available_memory_proportion=proportion)
        return simulate(stages, layout, profile, parameters=PARAMS)

    even = planned(0.6)
    hardware.check_memory(even)
    mapped = planned({"IPU0": 0.6, "IPU1": 0.0001})
    memories = mapped.pipeline.stage_memory
    assert memories[0] == even.pipeline.stage_memory[0]
    assert memories[1].planner.warnings and not memories[0].planner.warnings
    assert memories[1].total <= memories[1].capacity
    assert memories[1].worst_tile > memories[1].tile_capacity
    with pytest.raises(hardware.OutOfMemoryError) as err:
        hardware.check_memory(mapped)
    first, *rest = str(err.value).splitlines()
    assert first.startswith("Out of memory: IPU 1 (stage 1: B1)") and "fullest tile" in first
    assert any(line.startswith("  worst tile ") for line in rest)


def test_a_pipeline_fixed_cost_share_is_its_stages_compute_sets_over_their_passes():
    stages = _stages(2)
    layout = hardware.ReplicaLayout(4, 2, ipus_per_replica=2)
    sim = simulate(stages, layout, parameters=PARAMS)
    fixed = 2 * (40 + 60) * PARAMS.compute_set_seconds  # pod16's Mk2 runs at the fit's clock
    passes = sum(c.forward_seconds + c.backward_seconds for c in sim.replica.schedule.stages)
    assert hardware.fixed_cost_share(sim) == pytest.approx(fixed / passes)
    # The backward program reruns the forward: without recomputation its share goes.
    rerun = tuple(s._replace(backward_reruns_forward=True) for s in stages)
    costs = hardware.stage_costs(
        hardware.ReplicaModel(_profile(), rerun, "pipelined"), POD16.ipu, PARAMS
    )
    again = hardware.stage_costs(
        hardware.ReplicaModel(_profile(), stages, "pipelined"), POD16.ipu, PARAMS
    )
    assert costs[0].forward_seconds == again[0].forward_seconds
    assert costs[0].backward_seconds == pytest.approx(
        hardware.compute_seconds(1e7, 1e5, 0.0, POD16.ipu, "float32", PARAMS, compute_sets=20)
    )
