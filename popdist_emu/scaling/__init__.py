"""poprun-emu-scaling: sweeps of layouts, their analysis and the scaling report."""

from popdist_emu.scaling._cli import main as main

__all__ = [
    "main",
]
