"""Random operations (dropout) of a torch module, made pure and independent of the layout.

torchax draws every random number from a key its environment holds and splits on each draw.
Under ``jit`` that key becomes a tracer that outlives the trace, so the next program compiled
would capture it; and a key that moves with each call would give another mask on another
instance layout. So a random model's key is an input: every micro-batch's key is the
options' seed (PopTorch's ``randomSeed``) folded with the global index of the micro-batch's
first sample, which is the same on any layout, and the environment holds it only while the
module runs.

References:
    torchax documentation (the environment's PRNG key, ``Environment.manual_seed``); JAX
    documentation, "Pseudorandom numbers" (``jax.random.fold_in``, keys as explicit inputs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import jax
import numpy as np
import torchax
from jax.typing import ArrayLike

from popdist_emu import Options


@contextlib.contextmanager
def holding_key(key: jax.Array) -> Iterator[None]:
    """torchax draws from ``key`` inside the block; its own key is back afterwards."""
    param = torchax.default_env().param
    saved = param.prng
    param.prng = key
    try:
        yield
    finally:
        param.prng = saved


def draws_random(fn: Callable[..., object], *args: object) -> bool:
    """Whether ``fn(*args)`` draws random numbers (traced on shapes only)."""
    key = jax.random.PRNGKey(0)
    param = torchax.default_env().param
    with holding_key(key):
        jax.eval_shape(fn, *args)
        return param.prng is not key


def micro_batch_key(seed: int, first_index: ArrayLike) -> jax.Array:
    """The key of the micro-batch whose first sample has global index ``first_index``.

    A raw ``uint32[2]`` key (``PRNGKey``), not a typed one: the step's programs are profiled
    from their jaxprs, whose every value must have a NumPy dtype.
    """
    return jax.random.fold_in(jax.random.PRNGKey(seed), first_index)


def sample_indices(options: Options, call: int, size: int) -> np.ndarray:
    """Global indices of a call's combined batch of ``size`` samples, in its order.

    The combined batch is ``[device_iterations, accumulation, local replicas, micro]``; a
    sample's global index counts every replica of the job (PopDist's replica offset places
    this instance's), so it is the same wherever the sample's replica runs. Wraps at 2**31.
    """
    d, ga = options.device_iterations, options.gradient_accumulation
    local, total = options.replication_factor, options.layout.num_replicas
    micro = size // (d * ga * local)
    step = np.arange(d).reshape(d, 1, 1, 1) + call * d
    accumulation = np.arange(ga).reshape(1, ga, 1, 1)
    replica = np.arange(local).reshape(1, 1, local, 1) + options.replica_offset
    sample = np.arange(micro).reshape(1, 1, 1, micro)
    index = ((step * ga + accumulation) * total + replica) * micro + sample
    return (index % 2**31).astype(np.int32).reshape(-1)
