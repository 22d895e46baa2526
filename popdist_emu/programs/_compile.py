"""Compile a step's programs once per process, from values or shapes alone.

A :class:`Program` is a ``jax.stages.Compiled`` with the jaxpr it came from; the runtime
compiles its step's programs once (:func:`compile_program`) and calls those executables,
and the profile reads the same executables' analyses, so the simulated step is the step
that runs, functional and offline alike. Compiling works on ``jax.ShapeDtypeStruct`` shapes
as well as on arrays, which is what offline mode uses.

The compiled programs are kept for reuse in one place, the bounded
:data:`~popdist_emu.programs._cache.PROGRAM_CACHE`. JAX would keep a second copy of each:
its in-memory caches hold every executable of a jitted function, for every argument shape,
as long as the function lives (and the runtime keeps its step functions alive as the keys
that share programs between trainers). :func:`compile_program` therefore drops the
function's entries in JAX's caches once the program is compiled, so an evicted program's
memory is freed as soon as no trainer runs it.

References:
    JAX ahead-of-time lowering (``jax.jit(f).lower(...).compile()``,
    ``Compiled.cost_analysis()``, ``Compiled.memory_analysis()``); ``clear_cache()`` of a
    ``jax.jit`` function (``jax/_src/pjit.py``, ``jit_evict_fn``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.extend.core as jex

from popdist_emu._host_timeline import TIMELINE
from popdist_emu._progress import phase
from popdist_emu._trees import as_shape
from popdist_emu.programs._cache import PROGRAM_CACHE, ProgramKey
from popdist_emu.programs._compile_lock import compile_lock


class Program(NamedTuple):
    """One compiled program and the jaxpr it was compiled from.

    Calling it calls the ``jax.stages.Compiled`` directly, which never traces or compiles
    again: the program that runs is the program that was analysed.

    Attributes:
        compiled: the ``jax.stages.Compiled`` executable.
        jaxpr: the ``ClosedJaxpr`` it was lowered from (its operations and intermediates).
    """

    compiled: jax.stages.Compiled
    jaxpr: jex.ClosedJaxpr

    def __call__(self, *args: Any) -> Any:
        return self.compiled(*args)

    @property
    def out_info(self) -> Any:
        """Shapes and dtypes of the program's outputs (``jax.ShapeDtypeStruct`` leaves).

        ``Compiled.out_info`` came with JAX 0.7; before it (JAX 0.6, the newest on Python
        3.10) the lowered jaxpr's output avals in the compiled output tree say the same.
        """
        if hasattr(self.compiled, "out_info"):
            return jax.tree.map(
                lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), self.compiled.out_info
            )
        leaves = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in self.jaxpr.out_avals]
        return jax.tree.unflatten(self.compiled.out_tree, leaves)


# XLA options for a program compiled only to be analysed (offline mode; the profile's own
# stage programs), which never runs. XLA's cost and memory analyses come from the optimised
# HLO and its buffer assignment, before the backend generates machine code, so the backend's
# code optimisation is skipped: on ResNet-50's step the analyses are identical and the
# compile about a quarter shorter (``xla_backend_optimization_level`` in XLA's DebugOptions,
# https://github.com/openxla/xla/blob/main/xla/xla.proto).
# Typed ``Any`` values: XLA takes int-valued debug options, which jax's ``CompilerOptions``
# annotation (str | bool) leaves out.
ANALYSIS_ONLY_OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 0}


def compile_program(
    fn: Callable, *args: Any, label: str | None = None, analysis_only: bool = False
) -> Program:
    """Traces, lowers and compiles ``fn`` for ``args`` (arrays or shape structs), once per
    process while the program is kept: a second request for the same function and argument
    shapes returns the same :class:`Program` from the process's bounded cache
    (:data:`~popdist_emu.programs._cache.PROGRAM_CACHE`). The compilation is a named phase
    (``compiling <label> ...``, then its seconds), shown by instance 0.

    Hold the returned program to keep using it: an evicted program still runs for whoever
    holds it, and a later request compiles it again.

    Args:
        fn: jitted already (its ``donate_argnums`` and the like are kept) or a plain
            function, which is jitted here (pass the same jitted function to share programs).
            Its entries in JAX's in-memory caches are dropped once compiled (see the module
            docstring): calling ``fn`` directly afterwards compiles it again.
        *args: the arguments' values or ``jax.ShapeDtypeStruct`` shapes.
        label: what the phase messages call the program; default ``fn``'s name.
        analysis_only: the program is compiled to be analysed, never run (offline mode):
            XLA skips the backend's code optimisation (:data:`ANALYSIS_ONLY_OPTIONS`), which
            changes neither analysis. Such a program still runs correctly, only slower.
    """
    structs = jax.tree.map(as_shape, args)
    leaves, treedef = jax.tree.flatten(structs)
    key = ProgramKey(fn, treedef, tuple(leaves), analysis_only)
    program = PROGRAM_CACHE.get(key)
    if program is None:
        program = _compile(fn, structs, label, analysis_only)
        PROGRAM_CACHE.put(key, program)
    return program


def _compile(
    fn: Callable, structs: tuple[Any, ...], label: str | None, analysis_only: bool
) -> Program:
    """Compiles ``fn`` for ``structs`` and leaves nothing of it in JAX's in-memory caches."""
    jitted: Any = fn if hasattr(fn, "trace") else jax.jit(fn)  # jitted already, or now
    label = label or getattr(fn, "__name__", "a program")
    with (
        phase(f"compiling {label}", f"compiled {label}"),
        TIMELINE.span("compile", program=label),
    ):
        traced = jitted.trace(*structs)
        lowered = traced.lower()
        # The instances of a job compile the same programs: one compiles, the others
        # load the result from the persistent cache.
        with compile_lock(lowered.as_text()):
            options = ANALYSIS_ONLY_OPTIONS if analysis_only else None
            program = Program(lowered.compile(compiler_options=options), traced.jaxpr)
    # JAX keeps the trace (and through it the executable) while the function lives; the
    # program holds its own jaxpr and executable, so the cache above is the one keeper.
    clear = getattr(jitted, "clear_cache", None)
    if clear is not None:
        clear()
    return program
