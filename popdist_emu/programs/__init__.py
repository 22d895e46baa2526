"""Compiled programs and what XLA says about them: compile once, cost, memory, matmul plans."""

from popdist_emu.programs._matmuls import matmul_ops as matmul_ops
from popdist_emu.programs._matmuls import set_available_memory as set_available_memory
from popdist_emu.programs._matmuls import step_matmuls as step_matmuls
from popdist_emu.programs._profile import ANALYSIS_ONLY_OPTIONS as ANALYSIS_ONLY_OPTIONS
from popdist_emu.programs._profile import Program as Program
from popdist_emu.programs._profile import compile_program as compile_program
from popdist_emu.programs._profile import profile_programs as profile_programs
from popdist_emu.programs._profile import profile_step as profile_step

__all__ = [
    "ANALYSIS_ONLY_OPTIONS",
    "Program",
    "compile_program",
    "matmul_ops",
    "profile_programs",
    "profile_step",
    "set_available_memory",
    "step_matmuls",
]
