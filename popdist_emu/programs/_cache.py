"""The process's one store of compiled programs: bounded, least recently used out first.

Every program of a data-parallel trainer's step (the optimiser's init, the micro-step, the
micro-steps of several micro-batches together, the update, a layer-wise optimiser's sharded
passes), of a pipelined trainer's stages (each stage's forward and backward, which the
trainer's pipeline compiles through the ``compile_program`` the trainer hands it) and of
``profile_step`` goes through ``compile_program``, which looks it up here first, so such a
program is kept for reuse in exactly one place. A trainer (or its pipeline) keeps a strong
reference to the programs of the step shape it runs (that is use, not a cache), so evicting
one never breaks a live trainer: the bound only limits what is kept for a later trainer or
step shape, which compiles it again (or loads it from JAX's persistent compilation cache,
where ``poprun-emu`` turns it on).

Why the bound is :data:`MAX_PROGRAMS` (64): a data-parallel trainer compiles at most four
programs per step shape (the optimiser's init, the micro-step, the micro-steps of several
micro-batches together and the weight update), kept apart for functional and offline
(analysis-only) compiles, so 64 holds the programs of 16 step shapes, as many as the
runtime keeps jitted step functions to share them by (``JITTED_FUNCTIONS`` in
``popdist_emu.runtime._replica_step``); a pipeline stage has at most four too (its forward
and backward, functional and analysis-only), and 16 is as many stages as the pipeline keeps
jitted stage functions for (``STAGE_FUNCTIONS`` in ``popdist_emu.pipeline``). A program's
cost is its executable and the jaxpr the profile reads. Serialised
(``jax.experimental.serialize_executable``, CPU backend), a small MLP's micro-step is about
30 kB, and ResNet-50's gradient (float32, micro-batch 4) or LARS update about 3 MB each; so
even 64 programs of ResNet-50's size hold a few hundred MB, while a job, which compiles one
trainer's few programs, never evicts.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from popdist_emu.programs._compile import Program

# The most compiled programs the process keeps for reuse (see the module docstring).
MAX_PROGRAMS = 64


class ProgramKey(NamedTuple):
    """What decides a compiled program: the function, its arguments' shapes, and the options.

    Attributes:
        fn: the jitted function (its identity: pass the same object to share programs).
        treedef: the arguments' tree structure.
        leaves: the arguments' ``jax.ShapeDtypeStruct`` leaves.
        analysis_only: compiled for analysis only (other XLA options, a distinct program).
    """

    fn: Any
    treedef: Any
    leaves: tuple[Any, ...]
    analysis_only: bool


class ProgramCache:
    """Compiled programs by :class:`ProgramKey`, at most ``max_programs``, least recently used
    evicted first.

    Eviction drops the cache's reference only: whoever still holds the program (a trainer
    running it) keeps a working executable; once no one does, its memory is freed, because
    ``compile_program`` leaves nothing of it in JAX's own in-memory caches.

    Not thread-safe: the emulator compiles on the thread that builds and steps its trainers.

    Args:
        max_programs: the bound; :data:`MAX_PROGRAMS` for the process's cache.

    Raises:
        ValueError: a bound under 1.
    """

    def __init__(self, max_programs: int = MAX_PROGRAMS) -> None:
        if max_programs < 1:
            raise ValueError(f"ProgramCache: max_programs must be at least 1, got {max_programs}")
        self._max = int(max_programs)
        self._programs: collections.OrderedDict[ProgramKey, Program] = collections.OrderedDict()

    @property
    def max_programs(self) -> int:
        """The most programs kept."""
        return self._max

    def __len__(self) -> int:
        return len(self._programs)

    def __contains__(self, key: object) -> bool:
        """Whether ``key``'s program is kept (does not count as a use)."""
        return key in self._programs

    def get(self, key: ProgramKey) -> Program | None:
        """``key``'s program, now the most recently used; None when not kept."""
        program = self._programs.get(key)
        if program is not None:
            self._programs.move_to_end(key)
        return program

    def put(self, key: ProgramKey, program: Program) -> list[ProgramKey]:
        """Keeps ``program`` as the most recently used, evicting the least recently used
        beyond the bound.

        Returns:
            The evicted keys, oldest first.
        """
        self._programs[key] = program
        self._programs.move_to_end(key)
        evicted = []
        while len(self._programs) > self._max:
            evicted.append(self._programs.popitem(last=False)[0])
        return evicted

    def clear(self) -> None:
        """Drops every kept program (a live trainer keeps the ones it runs)."""
        self._programs.clear()


# The process's cache, which ``compile_program`` uses.
PROGRAM_CACHE = ProgramCache()
