"""The process keeps compiled programs in one bounded cache (``programs/_cache.py``): the least
recently used goes first, and an evicted program is really gone (JAX keeps no second copy
to hand back), yet still runs for whoever holds it.

Compilations are counted with JAX's monitoring events (the ``compiles`` fixture, conftest.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from popdist_emu.programs import (
    MAX_PROGRAMS,
    PROGRAM_CACHE,
    Program,
    ProgramCache,
    ProgramKey,
    compile_program,
)


def make_fn():
    # A fresh function per test: no program of it is kept from another test.
    def scaled_sine(x):
        return jnp.sin(x) * 2.0

    return jax.jit(scaled_sine)


def vector(n: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((n,), jnp.float32)


def key_of(fn, n: int) -> ProgramKey:
    leaves, treedef = jax.tree.flatten((vector(n),))
    return ProgramKey(fn, treedef, tuple(leaves), False)


def test_the_bound_is_the_named_constant():
    assert PROGRAM_CACHE.max_programs == MAX_PROGRAMS == 64
    with pytest.raises(ValueError, match="at least 1"):
        ProgramCache(0)


def test_the_least_recently_used_program_is_evicted_first():
    fn = make_fn()
    cache = ProgramCache(max_programs=3)
    keys = [key_of(fn, n) for n in range(1, 5)]
    programs = [compile_program(fn, vector(n)) for n in range(1, 5)]
    for key, program in zip(keys[:3], programs[:3], strict=True):
        assert cache.put(key, program) == []
    assert cache.get(keys[0]) is programs[0]  # now the most recently used
    assert cache.put(keys[3], programs[3]) == [keys[1]]
    assert len(cache) == 3 and keys[1] not in cache
    assert [cache.get(k) for k in (keys[0], keys[2], keys[3])] == [
        programs[0],
        programs[2],
        programs[3],
    ]
    cache.clear()
    assert len(cache) == 0 and cache.get(keys[0]) is None


def test_compile_program_keeps_one_program_per_function_shapes_and_options(compiles):
    fn = make_fn()
    first = compile_program(fn, vector(3))
    assert compile_program(fn, np.zeros(3, np.float32)) is first  # values or shapes alike
    assert key_of(fn, 3) in PROGRAM_CACHE
    analysed = compile_program(fn, vector(3), analysis_only=True)
    assert analysed is not first  # other XLA options: a program of its own
    assert len(compiles) == 2, compiles


def test_compiling_more_programs_than_the_bound_evicts_the_oldest(compiles):
    """The cache holds at most MAX_PROGRAMS; the first of MAX_PROGRAMS + 1 is evicted, and
    asking for it again compiles it again: nothing else kept it for reuse (before JAX's
    caches were dropped after a compile, JAX handed the evicted executable back)."""
    fn = make_fn()
    oldest = compile_program(fn, vector(1))
    for n in range(2, MAX_PROGRAMS + 2):
        compile_program(fn, vector(n))
    assert len(PROGRAM_CACHE) == MAX_PROGRAMS
    assert key_of(fn, 1) not in PROGRAM_CACHE and key_of(fn, 2) in PROGRAM_CACHE
    compiles.clear()
    again = compile_program(fn, vector(1))
    assert again is not oldest
    assert len(compiles) == 1, compiles
    # The holder of the evicted program still runs it.
    np.testing.assert_allclose(oldest(np.ones(1, np.float32)), 2.0 * np.sin(1.0), rtol=1e-6)


def test_a_held_program_is_the_executable_it_was_compiled_as():
    fn = make_fn()
    program = compile_program(fn, vector(2))
    assert isinstance(program, Program)
    assert program.out_info == vector(2)
    np.testing.assert_allclose(program(np.zeros(2, np.float32)), [0.0, 0.0])
