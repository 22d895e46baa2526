"""A stage's forward and backward: jitted functions shared by pipelines, programs per shape.

A stage runs two programs per micro-batch: its forward ``(p, x) -> y`` and its backward
``(p, x, dy_floats) -> (dp, dx_floats)``, which re-runs the forward from the stashed input
(XLA cannot hand one program's residuals to another) and differentiates with respect to the
parameters and the floating-point leaves of the input; integer leaves, such as labels, carry
no gradient, and the last stage's backward takes no cotangent (it differentiates the loss).

The functions (:class:`StageFunctions`) are shared by every pipeline of the same model and
blocks, as the key under which their programs are found again; the programs themselves are
compiled per step shape by :func:`compile_stages` through a ``compile`` callable the caller
injects. The runtime injects ``popdist_emu.programs.compile_program``, so each program is
compiled once per process, kept for reuse only in its bounded ``PROGRAM_CACHE``, and is
the one program the steps run and the hardware model profiles; this sub-package cannot
import ``programs`` itself (the layers are one-way), hence the injection. Without one
(a ``Pipeline`` built by hand), :func:`compile_alone` compiles programs that only the
pipeline holds, while it runs that step shape.

References:
    JAX ahead-of-time lowering (``jax.jit(f).lower(...).compile()``); "Memory and
    Performance Optimisation on the IPU", section 5.3 (recomputation).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from popdist_emu.pipeline._model import BlockModel

# ``compile(fn, *args, label=...)``: ``fn``'s program for ``args``' shapes, called as
# ``program(*args)``; ``popdist_emu.programs.compile_program`` in the runtime.
CompileFn = Callable[..., Any]

# The most stages whose jitted functions :func:`stage_functions` keeps. They are the stage
# programs' keys, not a program store: the same function object is what makes pipelines of
# the same model find one compiled program in the process's ``ProgramCache``, and every
# compile of them drops their entries in JAX's own caches (``compile_program`` does; so does
# :func:`compile_alone`), so a kept function holds no program, only its closure (the
# model's blocks). Bounded so that a process building pipelines of many models does not keep
# every model alive; a stage has at most four programs per step shape (forward and backward,
# each compiled to run or only to be analysed), so 16 stages' functions have as many programs
# as the ``ProgramCache`` keeps, ``MAX_PROGRAMS`` = 64, and 16 is more stages than a job or a
# sweep trains at once (one evicted while a pipeline of it lives only costs the next pipeline
# of that model a compile instead of a shared program).
STAGE_FUNCTIONS = 16


def float_mask(tree: Any) -> list[bool]:
    """Which leaves of ``tree`` (in ``jax.tree`` order) are floating point: the ones that carry
    gradients between stages (integer leaves, such as labels, travel along without one)."""
    return [bool(jnp.issubdtype(jnp.result_type(x), jnp.floating)) for x in jax.tree.leaves(tree)]


def merge_floats(
    treedef: Any,  # jax's PyTreeDef, which pyright cannot take as a type
    mask: Sequence[bool],
    floats: Sequence[jax.Array],
    others: Sequence[jax.Array],
) -> Any:
    """The tree :func:`split_floats` split: ``floats`` and ``others`` back in ``mask``'s order."""
    fi, oi, leaves = iter(floats), iter(others), []
    for is_float in mask:
        leaves.append(next(fi) if is_float else next(oi))
    return jax.tree.unflatten(treedef, leaves)


def split_floats(tree: Any, mask: Sequence[bool]) -> tuple[list[Any], list[Any]]:
    """``tree``'s leaves as ``(floating-point leaves, other leaves)``, by :func:`float_mask`."""
    leaves = jax.tree.leaves(tree)
    return (
        [x for x, f in zip(leaves, mask, strict=True) if f],
        [x for x, f in zip(leaves, mask, strict=True) if not f],
    )


def stage_vjp(fn: Callable[[Any, Any], Any], params: Any, x: Any) -> Callable[..., tuple[Any, ...]]:
    """The vjp closure of a stage ``fn(params, x)``: with respect to its parameters and the
    floating-point leaves of its input, for the floating-point leaves of its output.

    Its leaves are what the stage's forward saves for its backward (the residuals), which is
    why the hardware model's activation count traces exactly this function.
    """
    mask = float_mask(x)
    xf, xo = split_floats(x, mask)
    treedef = jax.tree.structure(x)

    def f(p: Any, floats: list[jax.Array]) -> list[jax.Array]:
        out = fn(p, merge_floats(treedef, mask, floats, xo))
        return [o for o in jax.tree.leaves(out) if jnp.issubdtype(o.dtype, jnp.floating)]

    return jax.vjp(f, params, xf)[1]


def _backward_of(
    fn: Callable[[Any, Any], Any], first: bool, last: bool
) -> Callable[..., tuple[Any, list[jax.Array]]]:
    """The stage's backward ``(p, x, dy_floats) -> (dp, dx_floats)`` (see the module
    docstring); the first stage's input is data, so its ``dx_floats`` is empty.

    The input is split into its floating-point and other leaves inside the program, by
    their traced dtypes, so the per-micro-batch call passes ``x`` as the forward got it.
    """

    def backward(p: Any, x: Any, dy_floats: list[jax.Array] | None) -> tuple[Any, list[jax.Array]]:
        x_def, x_mask = jax.tree.structure(x), float_mask(x)
        x_floats, x_others = split_floats(x, x_mask)

        def f(p: Any, xf: list[jax.Array]) -> Any:  # the loss (last) or floats
            out = fn(p, merge_floats(x_def, x_mask, xf, x_others))
            return out if last else split_floats(out, float_mask(out))[0]

        if first:
            out, vjp = jax.vjp(lambda p: f(p, x_floats), p)
            (dp,) = vjp(jnp.ones_like(out) if last else dy_floats)
            return dp, []
        out, vjp = jax.vjp(f, p, x_floats)
        return vjp(jnp.ones_like(out) if last else dy_floats)

    return backward


class StageFunctions:
    """One stage's jitted forward and backward: the keys of its programs, never run by a
    ``jax.jit`` dispatch (that would keep their executables in JAX's cache).

    Attributes:
        fn: the stage's blocks as one function ``fn(p, x) -> y``.
        first: the stage takes the micro-batch.
        last: the stage returns the loss.
        forward: ``jax.jit(fn)``.
        backward: the jitted ``(p, x, dy_floats) -> (dp, dx_floats)``.
    """

    def __init__(self, fn: Callable[[Any, Any], Any], first: bool, last: bool) -> None:
        self.fn, self.first, self.last = fn, first, last
        self.forward = jax.jit(fn)
        self.backward = jax.jit(_backward_of(fn, first, last))


def _stage_fn(model: BlockModel, blocks: tuple[str, ...]) -> Callable[[Any, Any], Any]:
    parts = [model.block(name) for name in blocks]

    def run(p: Any, x: Any) -> Any:
        for b in parts:
            x = b.fn({k: p[k] for k in b.params}, x)
        return x

    return run


@functools.lru_cache(maxsize=STAGE_FUNCTIONS)
def stage_functions(
    model: BlockModel, blocks: tuple[str, ...], first: bool, last: bool
) -> StageFunctions:
    """The stage's functions, shared by every pipeline of the same model and blocks (so
    pipelined and sharded runs of a model find each stage's programs once); cached per
    stage as the key of its programs (:data:`STAGE_FUNCTIONS`: a key, not a program store).
    The model is kept alive by its key while cached."""
    return StageFunctions(_stage_fn(model, blocks), first, last)


class StagePrograms(NamedTuple):
    """One stage's compiled programs for one step shape, and the shapes they take.

    Attributes:
        forward: ``(p, x) -> y``, as ``compile`` returned it (a ``popdist_emu.Program``
            in the runtime).
        backward: ``(p, x, dy_floats) -> (dp, dx_floats)``; ``dy_floats`` is None for the
            last stage.
        params: the stage's parameters (``jax.ShapeDtypeStruct`` leaves).
        input: its input ``x`` (the micro-batch for the first stage).
        output: its output ``y`` (the loss for the last stage).
    """

    forward: Any
    backward: Any
    params: Any
    input: Any
    output: Any


# What :func:`arguments_key` returns, compared for equality only: a tree's structure (jax's
# ``PyTreeDef``), and each leaf's shape, dtype and weak type as the leaf has them (None where
# it has none).
ArgumentsKey = tuple[object, tuple[tuple[object, object, object], ...]]


def arguments_key(tree: Any) -> ArgumentsKey:
    """What decides the programs ``tree``'s arguments run on, cheaply: its structure and its
    leaves' shapes, dtypes and weak types as they come (no canonical dtype, no
    ``ShapeDtypeStruct``), so a pipeline finds the programs it holds once per call for a few
    microseconds. Two keys may differ where the programs are the same (an int64 host array
    and its int32 shape); the pipeline then asks its ``compile`` again, which finds them."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple(
        (getattr(x, "shape", None), getattr(x, "dtype", None), getattr(x, "weak_type", False))
        for x in leaves
    )


def compile_stages(
    functions: Sequence[StageFunctions],
    stage_params: Sequence[Any],
    micro_batch: Any,
    compile: CompileFn,
) -> tuple[StagePrograms, ...]:
    """Every stage's forward and backward for one step shape, compiled by ``compile``.

    Args:
        functions: the stages' functions, in pipeline order.
        stage_params: each stage's parameters (``jax.ShapeDtypeStruct`` leaves).
        micro_batch: the first stage's input (``jax.ShapeDtypeStruct`` leaves).
        compile: ``compile(fn, *args, label=...)``, see :data:`CompileFn`.
    """
    out = []
    x = micro_batch
    for s, (f, p) in enumerate(zip(functions, stage_params, strict=True)):
        # The plain function: tracing the jitted one would leave its trace in JAX's cache.
        y = jax.eval_shape(f.fn, p, x)
        dy = None if f.last else split_floats(y, float_mask(y))[0]
        forward = compile(f.forward, p, x, label=f"stage {s}'s forward")
        backward = compile(f.backward, p, x, dy, label=f"stage {s}'s backward")
        out.append(StagePrograms(forward, backward, p, x, y))
        x = y
    return tuple(out)


class Jitted(Protocol):
    """A ``jax.jit`` function, as :func:`compile_alone` uses it."""

    def lower(self, *args: object) -> jax.stages.Lowered:
        """The function lowered for ``args`` (values or shapes)."""
        ...

    def clear_cache(self) -> None:
        """Drops the function's entries in JAX's in-memory caches."""
        ...


def compile_alone(fn: Jitted, *args: Any, label: str | None = None) -> jax.stages.Compiled:
    """``fn``'s program for ``args``, kept by no cache: the compile of a pipeline built without
    an injected one, which holds the program while it runs that step shape.

    ``fn``'s entries in JAX's in-memory caches are dropped once compiled, as
    ``compile_program`` does, so the shared jitted function keeps no program either.
    """
    del label  # the runtime's compile names its phase; this one has none
    compiled = fn.lower(*args).compile()
    fn.clear_cache()
    return compiled
