"""Compiled programs and what XLA says about them: compile once (kept in one bounded cache),
cost, memory, matmul plans, and the one builder of a step's ``hardware.StepProfile``."""

from popdist_emu.programs._analysis import JaxprSize as JaxprSize
from popdist_emu.programs._analysis import XlaCost as XlaCost
from popdist_emu.programs._analysis import jaxpr_size as jaxpr_size
from popdist_emu.programs._analysis import loss_vjp as loss_vjp
from popdist_emu.programs._analysis import precision_of as precision_of
from popdist_emu.programs._analysis import residual_bytes as residual_bytes
from popdist_emu.programs._analysis import xla_cost as xla_cost
from popdist_emu.programs._cache import MAX_PROGRAMS as MAX_PROGRAMS
from popdist_emu.programs._cache import PROGRAM_CACHE as PROGRAM_CACHE
from popdist_emu.programs._cache import ProgramCache as ProgramCache
from popdist_emu.programs._cache import ProgramKey as ProgramKey
from popdist_emu.programs._checkpoint_segments import (
    CheckpointSegments as CheckpointSegments,
)
from popdist_emu.programs._checkpoint_segments import (
    checkpoint_segments as checkpoint_segments,
)
from popdist_emu.programs._checkpoint_segments import names_checkpoints as names_checkpoints
from popdist_emu.programs._checkpoint_segments import unnamed as unnamed
from popdist_emu.programs._compile import ANALYSIS_ONLY_OPTIONS as ANALYSIS_ONLY_OPTIONS
from popdist_emu.programs._compile import Program as Program
from popdist_emu.programs._compile import compile_program as compile_program
from popdist_emu.programs._matmuls import matmul_ops as matmul_ops
from popdist_emu.programs._matmuls import set_available_memory as set_available_memory
from popdist_emu.programs._matmuls import step_matmuls as step_matmuls
from popdist_emu.programs._profile import profile_programs as profile_programs
from popdist_emu.programs._profile import profile_step as profile_step
from popdist_emu.programs._profile import program_counts as program_counts
from popdist_emu.programs._shapes import StepShapes as StepShapes
from popdist_emu.programs._shapes import accumulator_struct as accumulator_struct
from popdist_emu.programs._shapes import flat_size as flat_size
from popdist_emu.programs._shapes import gradient_nbytes as gradient_nbytes
from popdist_emu.programs._shapes import shape_struct as shape_struct
from popdist_emu.programs._step_profile import ProgramCounts as ProgramCounts
from popdist_emu.programs._step_profile import StepSettings as StepSettings
from popdist_emu.programs._step_profile import build_step_profile as build_step_profile

__all__ = [
    "ANALYSIS_ONLY_OPTIONS",
    "MAX_PROGRAMS",
    "PROGRAM_CACHE",
    "CheckpointSegments",
    "JaxprSize",
    "Program",
    "ProgramCache",
    "ProgramCounts",
    "ProgramKey",
    "StepSettings",
    "StepShapes",
    "XlaCost",
    "accumulator_struct",
    "build_step_profile",
    "checkpoint_segments",
    "compile_program",
    "flat_size",
    "gradient_nbytes",
    "jaxpr_size",
    "loss_vjp",
    "matmul_ops",
    "names_checkpoints",
    "precision_of",
    "profile_programs",
    "profile_step",
    "program_counts",
    "residual_bytes",
    "set_available_memory",
    "shape_struct",
    "step_matmuls",
    "unnamed",
    "xla_cost",
]
