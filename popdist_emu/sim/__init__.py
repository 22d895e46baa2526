"""Simulated IPU-POD time and memory of a run: a step's simulation, pipelines, one sweep point."""

from popdist_emu.sim._point import accumulation_for as accumulation_for
from popdist_emu.sim._point import evaluate_point as evaluate_point
from popdist_emu.sim._simulation import report_simulation as report_simulation
from popdist_emu.sim._simulation import simulate as simulate
from popdist_emu.sim._simulation import simulate_profile as simulate_profile
from popdist_emu.sim._simulation import simulated_system as simulated_system
from popdist_emu.sim._simulation import with_host_figures as with_host_figures
from popdist_emu.sim._simulation import with_infeed_stats as with_infeed_stats

__all__ = [
    "accumulation_for",
    "evaluate_point",
    "report_simulation",
    "simulate",
    "simulate_profile",
    "simulated_system",
    "with_host_figures",
    "with_infeed_stats",
]
