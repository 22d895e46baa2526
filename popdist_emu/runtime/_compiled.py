"""The compiled programs of a trainer's step: each compiled once, by argument shapes.

A step runs two programs: a replica's micro-step (absent for a pipeline, whose stages'
programs run instead) and the weight update. :class:`StepPrograms` compiles each distinct
one once per trainer (and :func:`~popdist_emu.programs.compile_program` once per process),
on first sight of its argument shapes, and the trainer calls those executables directly,
so what runs is what was compiled and profiled.

The reduce-and-update stage calls the update through :class:`UpdateProgram`, a holder of
the compiled update of the step shape in use, which the programs set when they compile a
step shape. The stage thus holds the program itself: control goes trainer -> stage ->
update program -> XLA, never back through the trainer.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from hardware import CollectiveRecord
from popdist_emu.programs import Program, StepShapes, compile_program
from popdist_emu.runtime._replica_step import Params


class CompiledStep(NamedTuple):
    """The programs one optimiser step runs, each compiled once, and its collectives.

    Attributes:
        micro_step: one replica's micro-step ``(params, acc, micro_batch) -> (acc, finite)``
            (``(acc, finite, outputs)`` for a trainer with ``has_aux``); None for a
            pipeline, whose stages' programs run instead.
        update: the optimiser update ``(params, opt_state, grad_flat) -> (params, opt_state)``.
        collectives: the collectives the reduce-and-update stage runs per update.
    """

    micro_step: Program | None
    update: Program
    collectives: tuple[CollectiveRecord, ...]


class UpdateProgram:
    """The compiled weight update of the step shape in use: what a reduce-and-update stage
    calls as its ``update_fn(params, opt_state, grad_flat) -> (params, opt_state)``.

    Empty until the trainer compiles a step shape (``Trainer.compile`` or the first
    ``Trainer.step``); :class:`StepPrograms` then sets :attr:`program`.
    """

    def __init__(self) -> None:
        self.program: Program | None = None

    def __call__(self, params: Params, opt_state: Any, grad_flat: Any) -> tuple[Any, Any]:
        if self.program is None:
            raise RuntimeError(
                "UpdateProgram: the weight update was not compiled yet; call "
                "Trainer.compile(batch) or Trainer.step(batch) before the stage runs."
            )
        return self.program(params, opt_state, grad_flat)


class StepPrograms:
    """The trainer's micro-steps and updates, compiled once each, by argument shapes.

    Args:
        grad_fn: the jitted micro-step ``(params, acc, micro_batch) -> (acc, finite)``, or
            ``(acc, finite, outputs)`` with ``has_aux``.
        update_fn: the jitted update ``(params, opt_state, grad_flat) -> (params, opt_state)``.
        with_micro_step: False for a pipeline (its stages' programs run instead).
        analysis_only: compile for analysis only (offline mode; see ``compile_program``).
    """

    def __init__(
        self,
        grad_fn: Any,
        update_fn: Any,
        *,
        with_micro_step: bool,
        analysis_only: bool,
    ) -> None:
        self.grad_fn, self.update_fn = grad_fn, update_fn
        self.with_micro_step, self.analysis_only = with_micro_step, analysis_only
        self.update = UpdateProgram()
        self._micro_steps: dict[Any, Program] = {}
        self._updates: dict[Any, Program] = {}

    def compile(self, shapes: StepShapes) -> tuple[Program | None, Program]:
        """The micro-step (None for a pipeline) and the update for ``shapes``, each compiled
        at most once; the update becomes :attr:`update`'s program."""
        acc, grad, micro = shapes.accumulator, shapes.gradient, shapes.micro_batch
        micro_key = (jax.tree.structure(micro), tuple(jax.tree.leaves(micro)), acc)
        if self.with_micro_step and micro_key not in self._micro_steps:
            self._micro_steps[micro_key] = compile_program(
                self.grad_fn,
                shapes.params,
                acc,
                micro,
                label="the replica's micro-step",
                analysis_only=self.analysis_only,
            )
        if grad not in self._updates:
            self._updates[grad] = compile_program(
                self.update_fn,
                shapes.params,
                shapes.opt_state,
                grad,
                label="the weight update",
                analysis_only=self.analysis_only,
            )
        update = self._updates[grad]
        self.update.program = update
        return self._micro_steps.get(micro_key), update
