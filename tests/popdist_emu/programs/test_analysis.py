"""What the profile reads off a jaxpr, for every kind of value a program holds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from popdist_emu.programs import jaxpr_size


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
