"""Renamed ``_simulated`` (every training run is simulated now); kept for its imports."""

from popdist_emu.poptorch._simulated import end_program, simulate_step

__all__ = ["end_program", "simulate_step"]
