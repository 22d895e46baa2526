"""A traced PyTorch forward's residuals, counted at its operations' boundaries."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch
import torchax

from popdist_emu._jaxpr_run import evaluate_eqns
from popdist_emu.programs import residual_bytes
from popdist_emu.programs._op_residuals import torch_op_of

BATCH, CHANNELS, SIDE = 2, 8, 16
ACTIVATION = BATCH * CHANNELS * SIDE * SIDE * 2  # one float16 feature map


def _conv_norm_silu() -> tuple[dict, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, CHANNELS, 3, padding=1),
        torch.nn.GroupNorm(4, CHANNELS),
        torch.nn.SiLU(),
        torch.nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1),
    ).half()
    return torchax.extract_jax(model)


def _vjp_of(fn):
    def vjp_of(weights, x):
        return jax.vjp(lambda w: fn(w, (x,)).astype(jnp.float32).sum(), weights)[1]

    return vjp_of


def test_a_traced_norm_and_silu_keep_what_popart_keeps():
    """Conv, group norm, SiLU, conv in half precision: PopART's gradient operations read the
    first conv's output (the norm's input), the norm's output (SiLU's input) and SiLU's
    output (the second conv's input), three feature maps and the norm's statistics. The
    lowering's own intermediates (the input minus its mean in float32, the normalised value,
    the sigmoid) are not kept."""
    weights, fn = _conv_norm_silu()
    x = jnp.ones((BATCH, 4, SIDE, SIDE), jnp.float16)
    saved = residual_bytes(_vjp_of(fn), weights, x)
    leaves = jax.tree.leaves(_vjp_of(fn)(weights, x))
    everything = sum(leaf.nbytes for leaf in leaves if leaf.size > 1)
    assert 3 * ACTIVATION <= saved < 3 * ACTIVATION + 1024
    assert everything > 2 * saved  # what JAX's vjp holds


def test_a_jax_program_is_counted_as_its_vjp_saves():
    """Outside any PyTorch operation every residual counts, once."""

    def loss(w, x):
        h = jnp.tanh(x @ w)
        return jnp.sum(jnp.sin(h) * h)

    w, x = jnp.ones((32, 32)), jnp.ones((8, 32))
    vjp_of = lambda w, x: jax.vjp(lambda q: loss(q, x), w)[1]  # noqa: E731
    closed = jax.make_jaxpr(vjp_of)(w, x)
    outs = {v for v in closed.jaxpr.outvars if v not in set(closed.jaxpr.invars)}
    assert residual_bytes(vjp_of, w, x) == sum(v.aval.size * 4 for v in outs)


def test_a_block_run_from_its_equations_keeps_the_operations_names():
    """PopTorch's blocks run the traced forward's equations again (``evaluate_eqns``): each
    equation keeps its operation's scope, so a pipeline stage is counted as the whole
    forward is."""
    weights, fn = _conv_norm_silu()
    x = jnp.ones((BATCH, 4, SIDE, SIDE), jnp.float16)
    closed = jax.make_jaxpr(lambda w, x: fn(w, (x,)))(weights, x)

    def rerun(w, x):
        env = dict(zip(closed.jaxpr.invars, [*jax.tree.leaves(w), x], strict=True))
        env.update(zip(closed.jaxpr.constvars, closed.consts, strict=True))
        return evaluate_eqns(closed.jaxpr.eqns, env, closed.jaxpr.outvars)[0]

    again = jax.make_jaxpr(rerun)(weights, x)
    ops = [torch_op_of(e) for e in again.jaxpr.eqns]
    assert "aten::native_group_norm" in ops and "aten::convolution" in ops
    assert residual_bytes(_vjp_of(lambda w, a: rerun(w, a[0])), weights, x) == residual_bytes(
        _vjp_of(fn), weights, x
    )


def _linear_then(activation: torch.nn.Module) -> tuple[dict, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), activation, torch.nn.Linear(16, 16))
    return torchax.extract_jax(model)


def test_an_operation_whose_gradient_reads_its_output_keeps_only_the_output():
    """PopART's TanhGradOp and SoftmaxGradOp read the forward output: between two linear
    maps PopART keeps the activation's output (which the second map's gradient reads too),
    not its input, whatever the lowering saved inside the operation."""
    x = jnp.ones((8, 16), jnp.float32)
    one_map = 8 * 16 * 4  # one float32 feature map; x itself is an input, not an activation
    for activation in (torch.nn.Tanh(), torch.nn.Softmax(dim=-1)):
        weights, fn = _linear_then(activation)
        assert residual_bytes(_vjp_of(fn), weights, x) == one_map, activation
    # A SiLU's gradient reads its input: the first map's output and SiLU's are both kept.
    weights, fn = _linear_then(torch.nn.SiLU())
    assert residual_bytes(_vjp_of(fn), weights, x) == 2 * one_map
