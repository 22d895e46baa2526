"""Matmuls and convolutions read from a step's jaxpr, and the per-operation setting."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from repo_scripts import load_example

import hardware
import popdist_emu
from popdist_emu import calibration
from popdist_emu.programs._matmuls import matmul_ops, set_available_memory, step_matmuls
from popdist_emu.reports._summary import format_summary, summary


def _loss(p, x):
    h = set_available_memory(x @ p["w1"], 0.2)
    y = jax.lax.conv_general_dilated(
        jax.nn.relu(h).reshape(4, 8, 8, 2),
        p["k"],
        (1, 1),
        "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    return (y**2).sum()


PARAMS = {"w1": jnp.ones((16, 128)), "k": jnp.ones((3, 3, 2, 4))}
X = jnp.ones((4, 16))


def test_operations_shapes_and_the_override_survive_into_the_gradient_jaxpr():
    ops = step_matmuls(jax.grad(_loss), PARAMS, X)
    kinds = [op.kind for op in ops]
    assert kinds.count("matmul") == 2 and kinds.count("conv") == 3
    forward = ops[0]
    assert (forward.rows, forward.columns, forward.reduction) == (4, 128, 16)
    conv = next(op for op in ops if op.kind == "conv")
    assert (conv.rows, conv.columns, conv.reduction, conv.depth) == (256, 4, 18, 2)
    # The marked matmul and its backward matmul carry 0.2; the convolutions do not.
    marked = {op.name.split(" ")[0]: op.available_memory_proportion for op in ops}
    assert [op.available_memory_proportion for op in ops if op.kind == "matmul"] == [0.2, 0.2]
    assert all(op.available_memory_proportion is None for op in ops if op.kind == "conv")
    assert marked  # names are "<primitive> #<n> <shapes>"
    assert all("#" in op.name for op in ops)


def test_with_the_weights_counted_each_operation_names_its_weight_or_none():
    weights = len(jax.tree.leaves(PARAMS))  # leaves in key order: k, w1

    def keyed(fn):
        ops = matmul_ops(jax.make_jaxpr(fn)(PARAMS, X), weights=weights, weight_prefix="s0 ")
        live = sorted(op.weight_key for op in ops if op.weight_live)
        computed = [op for op in ops if not op.weight_live]
        assert all(not op.weight_key for op in computed)
        return live, len(computed)

    # The forward matmul reads w1 and the forward convolution k; the convolution's data
    # gradient (the flipped kernel) and both weight gradients read values the step computes.
    assert keyed(jax.grad(_loss)) == (["s0 weight 0", "s0 weight 1"], 3)
    # Recomputed under jax.checkpoint, the forward reads the same two weights again.
    assert keyed(jax.grad(jax.checkpoint(_loss))) == (
        ["s0 weight 0", "s0 weight 0", "s0 weight 1", "s0 weight 1"],
        3,
    )
    # Without the count every right-hand operand is taken for a weight of its own.
    closed = jax.make_jaxpr(jax.grad(_loss))(PARAMS, X)
    assert all(op.weight_live and not op.weight_key for op in matmul_ops(closed))


def test_the_mark_is_an_identity_that_changes_no_numbers():
    plain = jax.grad(lambda p, x: ((x @ p["w1"]) ** 2).sum())(PARAMS, X)
    marked = jax.jit(jax.grad(lambda p, x: (set_available_memory(x @ p["w1"], 0.3) ** 2).sum()))(
        PARAMS, X
    )
    np.testing.assert_array_equal(plain["w1"], marked["w1"])
    assert popdist_emu.set_available_memory is set_available_memory  # the public name
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        set_available_memory(X, 0.0)


def test_grouped_convolutions_and_batched_matmuls_count_their_groups():
    def f(x, w, a, b):
        y = jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=4
        )
        return y.sum() + jnp.einsum("bij,bjk->bik", a, b).sum()

    shapes = (
        jax.ShapeDtypeStruct((2, 8, 8, 16), jnp.float16),
        jax.ShapeDtypeStruct((3, 3, 4, 32), jnp.float16),
        jax.ShapeDtypeStruct((5, 6, 7), jnp.float32),
        jax.ShapeDtypeStruct((5, 7, 9), jnp.float32),
    )
    conv, batched = matmul_ops(jax.make_jaxpr(f)(*shapes))
    assert (conv.groups, conv.rows, conv.columns, conv.reduction, conv.dtype_bytes) == (
        4,
        128,
        8,
        36,
        2,
    )
    assert (batched.groups, batched.rows, batched.columns, batched.reduction) == (5, 6, 9, 7)


def test_options_take_the_proportion_globally_and_per_ipu():
    assert popdist_emu.Options(replication_factor=1).available_memory_proportion == 0.6
    opts = popdist_emu.Options(replication_factor=1, available_memory_proportion={"IPU0": 0.3})
    assert opts.available_memory_proportion == {"IPU0": 0.3}
    with pytest.raises(ValueError, match="Options: available memory proportion"):
        popdist_emu.Options(replication_factor=1, available_memory_proportion=2.0)


def test_reports_list_phase_two_operations_and_the_worst_tile(capsys):
    from popdist_emu.programs import StepSettings, profile_step

    def grad_fn(p, x):
        return jax.grad(_loss)(p, x)

    tiny = StepSettings(micro_batch_size=X.shape[0], available_memory_proportion=1e-6)
    profile = profile_step(grad_fn, params=PARAMS, batch=(X,), settings=tiny)
    one = popdist_emu.Options(layout=hardware.ReplicaLayout(1), system="pod16")
    sim = popdist_emu.simulate_profile(profile, one)
    err = capsys.readouterr().err
    assert "convolution planner unable to meet memory target" in err
    entry = summary(sim)["available_memory"]["IPU0"]
    json.dumps(entry)
    assert entry["phase_two_operations"]
    assert entry["worst_tile_bytes"] >= entry["mean_tile_bytes"]
    assert entry["always_live_bytes"] + entry["not_always_live_bytes"] == sim.memory.total
    # The marked matmul keeps its own 0.2, which the 1e-6 of the IPU does not reach.
    assert entry["available_memory_proportions"] == [1e-6, 0.2]
    assert "planned for minimum memory" in format_summary(sim)


def test_resnet50_at_mlperfs_proportion_needs_no_minimum_memory_plan():
    """At PopLibs' default 0.6 every ResNet-50 convolution at micro-batch 20 gets its fastest
    plan; at the MLPerf submissions' 0.15 (what the calibration rows were fitted with) none
    falls back to phase two. Jaxpr only, no compile."""
    resnet50 = load_example("resnet50")

    grad_fn, _, _ = resnet50.make_step_functions(recomputation=True)
    params, _, images, labels = resnet50.example_shapes(calibration.RESNET50_MICRO_BATCH)
    ops = matmul_ops(jax.make_jaxpr(grad_fn)(params, images, labels), partials_type="half")
    assert len(ops) > 150

    def plan(proportion):
        return hardware._planner_step.plan_profile(
            hardware.StepProfile(
                grad_flops=1.0,
                grad_bytes_accessed=1.0,
                matmuls=ops,
                available_memory_proportion=proportion,
            ),
            hardware.GC200,
        )

    default = plan(0.6)
    assert not default.phase_two and default.extra_seconds == 0.0
    mlperf = plan(resnet50.MLPERF_AVAILABLE_MEMORY_PROPORTION)
    assert not mlperf.phase_two
    recorded = json.loads(hardware._parameters.CALIBRATION_FILE.read_text())["rows"]
    assert max(abs(r["error"]) for r in recorded) < 0.035  # the fit's bar (test_validate.py)
