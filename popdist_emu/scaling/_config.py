"""A scaling sweep as values: its configuration, its series, and what each series gave.

The command line is parsed once into a :class:`SweepConfig` (as torch's launcher parses into
a typed ``LaunchConfig``); the run, the table and the report take these values and never a
dictionary of settings. A point is :class:`popdist_emu._sweep.SweepPoint`, the request's
own type, so a point means the same thing in the CLI and in the program that evaluates it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from contract import SweepPoint


@dataclasses.dataclass(frozen=True)
class Series:
    """One series: the program run once, evaluated at every replica count of the sweep.

    Attributes:
        label: the series' name in the report (unique within a sweep).
        instances: ``--num-instances`` per replica count.
        ipus_per_replica: ``--ipus-per-replica``.
        system: ``--system`` for every point; empty: the smallest POD of ``ipu`` per point.
        ipu: ``mk2`` or ``bow`` (empty when ``system`` is given).
        program_args: the program's arguments.
    """

    label: str
    instances: tuple[int, ...]
    ipus_per_replica: int = 1
    system: str = ""
    ipu: str = "mk2"
    program_args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class PublishedPoint:
    """A measured point from ``--published`` (a CSV of ``replicas,throughput,label``)."""

    replicas: int
    throughput: float
    label: str


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """The whole sweep, as ``poprun-emu-scaling``'s command line gives it.

    Attributes:
        replicas: ``--num-replicas``, one point per count.
        global_batch: ``--global-batch`` per replica count (strong scaling), or None (weak).
        program: the training program.
        series: the command's own series, then one per ``--compare``.
        published: ``--published`` points.
        out: ``--out`` directory.
        timeout: ``--timeout`` seconds per series.
        calibrate_from: ``--calibrate-from``: measured runs to refit to first; empty: none.
    """

    replicas: tuple[int, ...]
    global_batch: tuple[int, ...] | None
    program: str
    series: tuple[Series, ...]
    published: tuple[PublishedPoint, ...] = ()
    out: str = "."
    timeout: float = 1800.0
    calibrate_from: str = ""

    @property
    def mode(self) -> str:
        """``strong`` (a fixed global batch: Amdahl) or ``weak`` (fixed work per replica)."""
        return "strong" if self.global_batch else "weak"

    @property
    def law(self) -> str:
        """The scaling law the sweep's speed-ups are fitted to."""
        return "amdahl" if self.mode == "strong" else "gustafson"


@dataclasses.dataclass(frozen=True)
class EvaluatedPoint:
    """A point and what became of it.

    Attributes:
        point: the layout asked for.
        result: the program's answer for it (``status``, ``reason``, ``summary`` as in
            ``summary.json``, ``link_tiers``, ``evaluation_seconds``); None until evaluated.
    """

    point: SweepPoint
    result: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class SeriesRun:
    """One series' run of the program: its points, and how the run went.

    Attributes:
        points: every point of the series, evaluated or refused.
        command: the ``poprun-emu`` line that ran (None when no point was valid).
        exit_code: the program's exit code (None when it did not run).
        compile_seconds: wall seconds of the run (None when it did not run).
        error: why the run gave no answer (empty when it did).
        model: the model's name and its step's batch settings, as the program answered.
    """

    points: tuple[EvaluatedPoint, ...]
    command: str | None = None
    exit_code: int | None = None
    compile_seconds: float | None = None
    error: str = ""
    model: Mapping[str, Any] | None = None
