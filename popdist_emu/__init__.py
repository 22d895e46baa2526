"""PopDist API and the replicated training runtime of the emulator.

The PopDist names are imported eagerly and pull in no JAX, so ``import popdist`` in a host
program stays cheap; every other name is loaded from its sub-package on first use (they need
JAX). ``__all__`` is static and the ``TYPE_CHECKING`` imports below name every export's home,
so type checkers and IDEs see all of them.

Sub-packages, one concept each: ``popdist`` (the PopDist API and framework helpers),
``pipeline`` (blocks, stages, strategies), ``data`` (loader, infeed, digits), ``programs``
(compiled programs and their profiles), ``runtime`` (the Trainer and its stages),
``reports`` (a run's reports), ``sim`` (simulated time and memory), ``scaling``
(``poprun-emu-scaling``).
"""

from __future__ import annotations

import ast
import functools
import importlib
import pathlib
from typing import TYPE_CHECKING, Any

from popdist_emu.popdist import api as _popdist_api
from popdist_emu.popdist.api import *  # noqa: F403 - the PopDist API, named once in its module

if TYPE_CHECKING:
    from contract import atomic_write as atomic_write
    from contract import write_atomically as write_atomically
    from popdist_emu._options import Options as Options
    from popdist_emu._options import is_offline_mode as is_offline_mode
    from popdist_emu._progress import Progress as Progress
    from popdist_emu._progress import show_phases as show_phases
    from popdist_emu.data import DigitsSplit as DigitsSplit
    from popdist_emu.data import Infeed as Infeed
    from popdist_emu.data import InfeedError as InfeedError
    from popdist_emu.data import InfeedStats as InfeedStats
    from popdist_emu.data import ReplicaLoader as ReplicaLoader
    from popdist_emu.data import compress as compress
    from popdist_emu.data import decompress as decompress
    from popdist_emu.data import load_digits_split as load_digits_split
    from popdist_emu.pipeline import Block as Block
    from popdist_emu.pipeline import BlockModel as BlockModel
    from popdist_emu.pipeline import Pipeline as Pipeline
    from popdist_emu.pipeline import PipelinedExecution as PipelinedExecution
    from popdist_emu.pipeline import PipelineError as PipelineError
    from popdist_emu.pipeline import ShardedExecution as ShardedExecution
    from popdist_emu.pipeline import Stage as Stage
    from popdist_emu.programs import Program as Program
    from popdist_emu.programs import StepSettings as StepSettings
    from popdist_emu.programs import compile_program as compile_program
    from popdist_emu.programs import profile_programs as profile_programs
    from popdist_emu.programs import profile_step as profile_step
    from popdist_emu.programs import set_available_memory as set_available_memory
    from popdist_emu.runtime import AllReduceUpdate as AllReduceUpdate
    from popdist_emu.runtime import CheckpointError as CheckpointError
    from popdist_emu.runtime import CompiledStep as CompiledStep
    from popdist_emu.runtime import LeverInfo as LeverInfo
    from popdist_emu.runtime import NonFiniteGradientError as NonFiniteGradientError
    from popdist_emu.runtime import NonScalarLossError as NonScalarLossError
    from popdist_emu.runtime import OffloadedUpdate as OffloadedUpdate
    from popdist_emu.runtime import ReduceUpdateStage as ReduceUpdateStage
    from popdist_emu.runtime import ShardedOptState as ShardedOptState
    from popdist_emu.runtime import ShardedReduceUpdate as ShardedReduceUpdate
    from popdist_emu.runtime import ShardingError as ShardingError
    from popdist_emu.runtime import StageResult as StageResult
    from popdist_emu.runtime import StreamingState as StreamingState
    from popdist_emu.runtime import Trainer as Trainer
    from popdist_emu.runtime import TrainState as TrainState
    from popdist_emu.runtime import check_checkpoint as check_checkpoint
    from popdist_emu.runtime import claim_checkpoint_dir as claim_checkpoint_dir
    from popdist_emu.runtime import lamb as lamb
    from popdist_emu.runtime import lars as lars
    from popdist_emu.runtime import read_checkpoint_meta as read_checkpoint_meta
    from popdist_emu.runtime import restore_checkpoint as restore_checkpoint
    from popdist_emu.runtime import save_checkpoint as save_checkpoint
    from popdist_emu.sim import profile_replica as profile_replica
    from popdist_emu.sim import report_simulation as report_simulation
    from popdist_emu.sim import simulate as simulate
    from popdist_emu.sim import simulate_profile as simulate_profile
    from popdist_emu.sim import simulate_replica as simulate_replica
    from popdist_emu.sim import simulated_system as simulated_system
    from popdist_emu.sim import with_infeed_stats as with_infeed_stats

__all__ = [
    "AllReduceUpdate",
    "Block",
    "BlockModel",
    "CheckpointError",
    "CompiledStep",
    "DigitsSplit",
    "Infeed",
    "InfeedError",
    "InfeedStats",
    "LeverInfo",
    "NonFiniteGradientError",
    "NonScalarLossError",
    "OffloadedUpdate",
    "Options",
    "Pipeline",
    "PipelineError",
    "PipelinedExecution",
    "Program",
    "Progress",
    "ReduceUpdateStage",
    "ReplicaLoader",
    "ShardedExecution",
    "ShardedOptState",
    "ShardedReduceUpdate",
    "ShardingError",
    "Stage",
    "StageResult",
    "StepSettings",
    "StreamingState",
    "TrainState",
    "Trainer",
    "atomic_write",
    "check_checkpoint",
    "claim_checkpoint_dir",
    "compile_program",
    "compress",
    "decompress",
    "is_offline_mode",
    "lamb",
    "lars",
    "load_digits_split",
    "profile_programs",
    "profile_replica",
    "profile_step",
    "read_checkpoint_meta",
    "report_simulation",
    "restore_checkpoint",
    "save_checkpoint",
    "set_available_memory",
    "show_phases",
    "simulate",
    "simulate_profile",
    "simulate_replica",
    "simulated_system",
    "with_infeed_stats",
    "write_atomically",
]

__all__ += _popdist_api.__all__


@functools.cache
def _lazy() -> dict[str, str]:
    """Name -> the module that exports it, read once from the ``TYPE_CHECKING`` imports above
    (the one place each lazy name is written beside ``__all__``), on the first lazy name a
    program asks for, so ``import popdist`` parses nothing."""
    tree = ast.parse(pathlib.Path(__file__).read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def __getattr__(name: str) -> Any:
    module = _lazy().get(name)
    if module is None:
        raise AttributeError(f"module 'popdist_emu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
