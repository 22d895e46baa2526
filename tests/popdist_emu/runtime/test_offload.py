"""Optimiser-state offloading: host-resident state, identical numbers, bytes moved per step."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popdist_emu._trees import tree_nbytes
from popdist_emu.runtime._offload import (
    OffloadedUpdate,
    StreamingState,
    StreamTraffic,
    offload_traffic,
    offloaded_update,
    stream_in,
    stream_out,
)

OPTIMISERS = {
    "adamw": lambda: optax.adamw(1e-2, weight_decay=1e-2),
    "sgd_momentum": lambda: optax.sgd(1e-1, momentum=0.9),
    "adam_bf16_mu": lambda: optax.adam(1e-2, mu_dtype=jnp.bfloat16),
}


def _make_update(optimiser):
    @jax.jit
    def update(params, opt_state, grads):
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return update


@settings(max_examples=10)
@given(
    shapes=st.lists(st.lists(st.integers(1, 5), max_size=2), min_size=1, max_size=3),
    name=st.sampled_from(sorted(OPTIMISERS)),
    steps=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_offloaded_state_trains_bit_identically_to_on_chip(shapes, name, steps, seed):
    rng = np.random.default_rng(seed)
    params = {f"w{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    grads = [jax.tree.map(lambda p: rng.standard_normal(p.shape).astype(p.dtype), params)]
    grads = grads * steps
    optimiser = OPTIMISERS[name]()
    update = _make_update(optimiser)

    on_chip_params, on_chip_state = params, optimiser.init(params)
    off_params, stored = params, stream_out(optimiser.init(params))
    for g in grads:
        on_chip_params, on_chip_state = update(on_chip_params, on_chip_state, g)
        off_params, stored, traffic = offloaded_update(update, off_params, stored, g)
        assert all(type(leaf) is np.ndarray for leaf in stored.leaves)
        assert traffic == StreamTraffic(tree_nbytes(on_chip_state), tree_nbytes(on_chip_state))
        assert traffic.total == 2 * stored.nbytes

    for a, b in zip(jax.tree.leaves(on_chip_params), jax.tree.leaves(off_params), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    for a, b in zip(jax.tree.leaves(on_chip_state), stored.leaves, strict=True):
        assert np.asarray(a).dtype == b.dtype
        assert np.asarray(a).tobytes() == b.tobytes()


def test_streamed_out_state_is_an_owned_host_copy():
    state = optax.adam(1e-3).init({"w": jnp.ones(4)})
    stored = stream_out(state)
    assert isinstance(stored, StreamingState)
    assert all(leaf.flags.owndata and leaf.flags.writeable for leaf in stored.leaves)
    stored.leaves[1][:] = 7.0  # mu in streaming memory; the device state is untouched
    assert float(jax.tree.leaves(state)[1][0]) == 0.0
    back = stream_in(stored)
    assert jax.tree.structure(back) == jax.tree.structure(state)
    assert float(jax.tree.leaves(back)[1][0]) == 7.0


def test_state_bytes_are_what_the_memory_model_is_told():
    params = {"w": jnp.zeros((10, 3)), "b": jnp.zeros(3)}
    state = optax.adam(1e-3).init(params)  # count (int32) + mu + nu
    assert tree_nbytes(state) == 4 + 2 * 4 * (30 + 3)
    assert stream_out(state).nbytes == tree_nbytes(state)


def test_stream_in_refuses_device_state():
    with pytest.raises(TypeError, match="`stored` must be a StreamingState"):
        stream_in(optax.sgd(0.1).init({"w": jnp.ones(2)}))


def test_offloaded_update_drops_into_a_donating_update_function():
    optimiser = optax.adamw(1e-2)
    params = {"w": jnp.arange(6.0).reshape(2, 3)}
    grads = {"w": jnp.full((2, 3), 0.5)}

    def update(p, s, g):
        u, s = optimiser.update(g, s, p)
        return optax.apply_updates(p, u), s

    donating = jax.jit(update, donate_argnums=(0, 1))
    on_chip = jax.jit(update)(params, optimiser.init(params), grads)
    step = OffloadedUpdate(donating)
    stored = stream_out(optimiser.init(params))
    new_params, new_stored = step(jax.tree.map(jnp.array, params), stored, grads)
    assert isinstance(new_stored, StreamingState)
    assert np.asarray(new_params["w"]).tobytes() == np.asarray(on_chip[0]["w"]).tobytes()
    # The old streaming copy survives the donation: stream_in never aliases it.
    assert all(np.isfinite(leaf).all() for leaf in stored.leaves)


def test_traffic_from_shapes_alone():
    shapes = jax.eval_shape(optax.adam(1e-3).init, {"w": jax.ShapeDtypeStruct((8, 8), jnp.float32)})
    assert offload_traffic(shapes) == StreamTraffic(4 + 2 * 256, 4 + 2 * 256)
    assert offload_traffic(shapes).total == 2 * (4 + 2 * 256)
