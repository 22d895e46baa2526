"""Simulated IPU-POD time and memory of a run: a trainer's replica (one stage or a
pipeline's), its one checked simulation, one sweep point."""

from popdist_emu.sim._checked import checked_step as checked_step
from popdist_emu.sim._point import accumulation_for as accumulation_for
from popdist_emu.sim._point import evaluate_point as evaluate_point
from popdist_emu.sim._replica_profile import profile_replica as profile_replica
from popdist_emu.sim._simulation import report_simulation as report_simulation
from popdist_emu.sim._simulation import simulate as simulate
from popdist_emu.sim._simulation import simulate_profile as simulate_profile
from popdist_emu.sim._simulation import simulate_replica as simulate_replica
from popdist_emu.sim._simulation import simulated_system as simulated_system
from popdist_emu.sim._simulation import with_host_figures as with_host_figures
from popdist_emu.sim._simulation import with_infeed_stats as with_infeed_stats

__all__ = [
    "accumulation_for",
    "checked_step",
    "evaluate_point",
    "profile_replica",
    "report_simulation",
    "simulate",
    "simulate_profile",
    "simulate_replica",
    "simulated_system",
    "with_host_figures",
    "with_infeed_stats",
]
