"""What the profile reads off a jaxpr, for every kind of value a program holds."""

from __future__ import annotations

import jax
import jax.extend.core
import jax.numpy as jnp
import torch
import torchax
from jax.ad_checkpoint import checkpoint_name

from popdist_emu.programs import jaxpr_size
from popdist_emu.programs._op_residuals import torch_op_of


def test_sizes_count_sub_jaxprs_and_prng_keys():
    """A dropout-like program holds typed PRNG keys (``key<fry>``, 8 bytes each), which
    NumPy cannot interpret; a ``cond`` holds its branches as sub-jaxprs."""

    def program(key, x):
        keep = jax.random.bernoulli(jax.random.fold_in(key, 3), 0.5, x.shape)
        return jax.lax.cond(x.sum() > 0, lambda y: y * 2.0, lambda y: -y, jnp.where(keep, x, 0))

    closed = jax.make_jaxpr(program)(jax.random.PRNGKey(0), jnp.ones((64, 64), jnp.float32))
    size = jaxpr_size(closed.jaxpr)
    assert size.num_ops > len(closed.jaxpr.eqns)  # the branches' and the sampler's too
    assert size.largest_bytes == 64 * 64 * 4
    assert size.code_ops == size.num_ops  # a JAX program: every primitive holds code


def test_a_checkpoint_name_is_no_operation():
    """PopTorch's ``recomputationCheckpoint`` names a value; it computes nothing, so it is
    no compute set: a program with it is priced as one without."""

    def plain(x):
        return jnp.tanh(jnp.sin(x))

    def named(x):
        return jnp.tanh(checkpoint_name(jnp.sin(x), "kept"))

    shape = jax.ShapeDtypeStruct((4,), jnp.float32)
    sizes = [jaxpr_size(jax.make_jaxpr(f)(shape).jaxpr) for f in (plain, named)]
    assert sizes[0] == sizes[1]


def test_a_traced_pytorch_operation_holds_code_once():
    """PopART compiles one ONNX operation per PyTorch operation, whatever torchax lowered
    it to: a traced conv, group norm, SiLU and conv hold code as four operations, however
    many primitives their lowering took; glue outside any operation counts per primitive."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, 8, 3, padding=1),
        torch.nn.GroupNorm(4, 8),
        torch.nn.SiLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1),
    )
    weights, fn = torchax.extract_jax(model)
    x = jax.ShapeDtypeStruct((2, 4, 16, 16), jnp.float32)
    closed = jax.make_jaxpr(lambda w, x: fn(w, (x,)))(weights, x)
    glue = [e for e in closed.jaxpr.eqns if torch_op_of(e) is None]
    ops = {torch_op_of(e) for e in closed.jaxpr.eqns} - {None}
    size = jaxpr_size(closed.jaxpr)
    assert ops == {"aten::convolution", "aten::native_group_norm", "aten::silu"}
    glue_code = sum(jaxpr_size(jax.extend.core.Jaxpr([], [], [], [e])).code_ops for e in glue)
    assert size.code_ops == 4 + glue_code
    assert size.num_ops > 4 * size.code_ops
