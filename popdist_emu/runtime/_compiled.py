"""The compiled programs of a trainer's step: looked up in the process's program cache.

A step runs up to three programs: a replica's micro-step (absent for a pipeline, whose
stages' programs run instead, compiled through the same cache by ``Pipeline.compile``), the
micro-steps of several of its micro-batches together (where their gradients fit, functional
only) and the weight update. :class:`StepPrograms` asks
:func:`~popdist_emu.programs.compile_program` for them on first sight of a step shape, so
each is compiled once per process and kept for reuse in one place, the bounded
``PROGRAM_CACHE``; the trainer holds only the programs of the step shape it runs
(:class:`CompiledStep`) and calls those executables directly, so what runs is what was
compiled and profiled, and an eviction from the cache never breaks a live trainer.

The reduce-and-update stage calls the update through :class:`UpdateProgram`, a holder of
the compiled update of the step shape in use, which the programs set when they compile a
step shape. The stage thus holds the program itself: control goes trainer -> stage ->
update program -> XLA, never back through the trainer.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np

from hardware import CollectiveRecord
from popdist_emu.programs import Program, StepShapes, compile_program
from popdist_emu.runtime._replica_step import Params, micro_batches_per_program


class CompiledStep(NamedTuple):
    """The programs one optimiser step runs, each compiled once, and its collectives.

    A trainer holds the programs of the step shape it runs here: held, they keep working
    whatever the process's bounded program cache evicts.

    Attributes:
        micro_step: one replica's micro-step ``(params, acc, micro_batch) -> (acc, finite)``
            (``(acc, finite, outputs)`` for a trainer with ``has_aux``); None for a
            pipeline, whose stages' programs run instead.
        update: the optimiser update ``(params, opt_state, grad_flat) -> (params, opt_state)``.
        collectives: the collectives the reduce-and-update stage runs per update.
        batched: the micro-steps of ``micro_batches_per_program`` micro-batches together
            (``make_batched_micro_steps``), what a functional step runs where more than one
            fit; None where one micro-batch at a time runs, offline and for a pipeline.
    """

    micro_step: Program | None
    update: Program
    collectives: tuple[CollectiveRecord, ...]
    batched: Program | None = None


class ShapePrograms(NamedTuple):
    """The programs of one step shape, as :meth:`StepPrograms.compile` finds them.

    Attributes:
        micro_step: see :class:`CompiledStep`.
        update: see :class:`CompiledStep`.
        batched: see :class:`CompiledStep`.
    """

    micro_step: Program | None
    update: Program
    batched: Program | None


class UpdateProgram:
    """The compiled weight update of the step shape in use: what a reduce-and-update stage
    calls as its ``update_fn(params, opt_state, grad_flat) -> (params, opt_state)``.

    Empty until the trainer compiles a step shape (``Trainer.compile`` or the first
    ``Trainer.step``); :class:`StepPrograms` then sets :attr:`program`.
    """

    def __init__(self) -> None:
        self.program: Program | None = None

    def __call__(
        self, params: Params, opt_state: Any, grad_flat: jax.Array | np.ndarray
    ) -> tuple[Any, Any]:
        if self.program is None:
            raise RuntimeError(
                "UpdateProgram: the weight update was not compiled yet; call "
                "Trainer.compile(batch) or Trainer.step(batch) before the stage runs."
            )
        return self.program(params, opt_state, grad_flat)


class StepPrograms:
    """The programs of a trainer's step shapes, looked up in the process's program cache.

    Keeps no programs of its own: every lookup goes to ``compile_program``, whose bounded
    cache is the one place compiled programs are kept for reuse (a trainer's earlier step
    shape that was evicted compiles again when it comes back). Only the update in use is
    held, by :attr:`update`, which the reduce-and-update stage calls.

    Args:
        grad_fn: the jitted micro-step ``(params, acc, micro_batch) -> (acc, finite)``, or
            ``(acc, finite, outputs)`` with ``has_aux``.
        update_fn: the jitted update ``(params, opt_state, grad_flat) -> (params, opt_state)``.
        batched_fn: the jitted micro-steps of several micro-batches together
            (``make_batched_micro_steps``), or None to run one micro-batch at a time.
        gradient_accumulation: micro-batches per update, of which ``batched_fn`` computes
            ``micro_batches_per_program`` together.
        with_micro_step: False for a pipeline (its stages' programs run instead).
        analysis_only: compile for analysis only (offline mode; see ``compile_program``);
            such programs never run, so ``batched_fn`` is not compiled.
    """

    def __init__(
        self,
        grad_fn: jax.stages.Wrapped,
        update_fn: jax.stages.Wrapped,
        batched_fn: jax.stages.Wrapped | None = None,
        *,
        gradient_accumulation: int = 1,
        with_micro_step: bool,
        analysis_only: bool,
    ) -> None:
        self.grad_fn, self.update_fn, self.batched_fn = grad_fn, update_fn, batched_fn
        self.gradient_accumulation = gradient_accumulation
        self.with_micro_step, self.analysis_only = with_micro_step, analysis_only
        self.update = UpdateProgram()

    def compile(self, shapes: StepShapes) -> ShapePrograms:
        """The programs of ``shapes`` (each compiled at most once while the cache keeps it);
        the update becomes :attr:`update`'s program."""
        acc, micro = shapes.accumulator, shapes.micro_batch
        only = self.analysis_only
        micro_step = batched = None
        if self.with_micro_step:
            micro_step = compile_program(
                self.grad_fn,
                shapes.params,
                acc,
                micro,
                label="the replica's micro-step",
                analysis_only=only,
            )
            together = self._together(acc)
            # `together` is 1 without a batched function; the test narrows it for the checker.
            if together > 1 and self.batched_fn is not None:
                stacked = jax.tree.map(
                    lambda x: jax.ShapeDtypeStruct((together, *x.shape), x.dtype), micro
                )
                batched = compile_program(
                    self.batched_fn,
                    shapes.params,
                    acc,
                    stacked,
                    label=f"the replica's micro-steps, {together} micro-batches together",
                )
        update = compile_program(
            self.update_fn,
            shapes.params,
            shapes.opt_state,
            shapes.gradient,
            label="the weight update",
            analysis_only=only,
        )
        self.update.program = update
        return ShapePrograms(micro_step, update, batched)

    def _together(self, acc: jax.ShapeDtypeStruct) -> int:
        """Micro-batches the batched program computes together; 1: it is not compiled."""
        if self.batched_fn is None or self.analysis_only:
            return 1
        nbytes = math.prod(acc.shape) * np.dtype(acc.dtype).itemsize
        return micro_batches_per_program(self.gradient_accumulation, nbytes)
