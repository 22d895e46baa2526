"""The one checked path of every simulated step: run, plain, pipelined or a sweep point.

Poplar plans a program's matmuls and convolutions (logging PopLibs' phase-two warnings)
and refuses at compile time a graph that does not fit in In-Processor-Memory; every
simulated step goes through the same two checks after ``hardware.simulate_step``.

References:
    Graphcore, "Optimising Temporary Memory Usage for Convolutions and Matmuls on the IPU"
    (the phase-two warning); Poplar's ``Out of memory`` graph-compile error.
"""

from __future__ import annotations

from typing import IO

import hardware
from popdist_emu.reports import print_planner_warnings


def check_step(
    simulation: hardware.StepSimulation, *, warnings: IO[str] | None = None
) -> hardware.StepSimulation:
    """PopLibs' phase-two warnings of every IPU to ``warnings`` (None: not printed), then
    Poplar's memory check; the simulation when it fits.

    Raises:
        hardware.OutOfMemoryError: an IPU of the replica does not fit; the message starts
            with Poplar's ``Out of memory:``, names the IPU of a pipelined replica and its
            stages, and lists the categories and remedies.
    """
    if warnings is not None:  # before any refusal, as Poplar logs them while planning
        print_planner_warnings(simulation, file=warnings)
    hardware.check_memory(simulation)
    return simulation


def checked_step(
    model: hardware.ReplicaModel,
    layout: hardware.ReplicaLayout,
    system: hardware.SystemSpec,
    *,
    prefetch_depth: int = hardware.DEFAULT_PREFETCH_DEPTH,
    parameters: hardware.ModelParameters | None = None,
    warnings: IO[str] | None = None,
) -> hardware.StepSimulation:
    """``hardware.simulate_step`` of ``model`` under ``layout`` on ``system``, checked
    (:func:`check_step`).

    Raises:
        hardware.OutOfMemoryError: as :func:`check_step`.
        hardware.SystemSelectionError: the layout does not fit the system.
    """
    simulation = hardware.simulate_step(
        model, layout, system, parameters=parameters, prefetch_depth=prefetch_depth
    )
    return check_step(simulation, warnings=warnings)
