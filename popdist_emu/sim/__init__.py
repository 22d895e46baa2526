"""Simulated IPU-POD time and memory of a run: a step's simulation, pipelines, one sweep point."""

from popdist_emu.sim._point import COLLECTIVE_PHASES as COLLECTIVE_PHASES
from popdist_emu.sim._point import REQUEST_VARIABLE as REQUEST_VARIABLE
from popdist_emu.sim._point import system_name as system_name
from popdist_emu.sim._simulation import report_simulation as report_simulation
from popdist_emu.sim._simulation import simulate as simulate
from popdist_emu.sim._simulation import simulate_profile as simulate_profile
from popdist_emu.sim._simulation import with_infeed_stats as with_infeed_stats

__all__ = [
    "COLLECTIVE_PHASES",
    "REQUEST_VARIABLE",
    "report_simulation",
    "simulate",
    "simulate_profile",
    "system_name",
    "with_infeed_stats",
]
