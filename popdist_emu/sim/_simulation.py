"""The glue between a run and the hardware model: profile, simulate, check memory, report.

Every run, functional or offline, reports through the same two calls, so the simulated step
of a configuration depends only on its shapes and layout, never on whether the numerics ran:

    simulation = popdist_emu.simulate(trainer, batch_or_shapes)  # OutOfMemoryError if too big
    popdist_emu.report_simulation(simulation)  # instance 0 prints and writes the reports

``simulate`` profiles the compiled programs the trainer runs (``Trainer.profile``; compiled
once, offline from shapes only), picks the system
from ``POPDIST_EMU_SYSTEM`` (``--system``; empty = the smallest Mk2 POD that holds the job),
simulates the step and checks IPU memory, as Poplar refuses at compile time a graph that does
not fit. It is deterministic and needs no communication, so every instance may call it and
they all agree. ``report_simulation`` prints the short human summary and writes
``summary.json`` and ``trace.json`` to ``POPDIST_EMU_REPORT_DIR`` (``--report-dir``), from
instance 0 only.

References:
    Graphcore PopRun user guide: ``--offline-mode`` (compile only) and the launcher's
    environment; Poplar's ``Out of memory`` graph-compile error.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any

import jax

import hardware
from contract import (
    ENV_COMMAND,
    ENV_JOB_DIR,
    ENV_REPORT_DIR,
    ENV_SYSTEM,
    InstanceEnvironment,
)
from popdist_emu._host_timeline import collect, publish
from popdist_emu.data import InfeedStats
from popdist_emu.reports import format_summary, print_planner_warnings, run_info, write_reports
from popdist_emu.runtime import Trainer
from popdist_emu.sim._pipeline_profile import simulate_pipeline, with_profile
from popdist_emu.sim._point import Relayout, answer_request, trainer_relayout


def job_layout(num_total_replicas: int, environ: Mapping[str, str]) -> hardware.ReplicaLayout:
    """The job's layout: PopRun's, or, outside PopRun, one instance driving every replica.

    Outside the launcher the environment reads one replica, yet a program may still drive
    several (``Options(replication_factor=4)``); the given count wins.
    """
    layout = InstanceEnvironment.from_environ(environ).layout
    if layout.num_replicas == num_total_replicas:
        return layout
    return hardware.ReplicaLayout(
        num_replicas=num_total_replicas,
        num_instances=1,
        ipus_per_replica=layout.ipus_per_replica,
        hosts=layout.hosts[:1],
    )


def simulate(
    trainer: Trainer,
    batch: Any,
    *,
    infeed_stats: InfeedStats | None = None,
    system: str | None = None,
    name: str = "model",
    environ: Mapping[str, str] | None = None,
    host: Mapping[str, Any] | None = None,
) -> hardware.StepSimulation:
    """Simulates one step of ``trainer`` on the job's IPU system and checks that it fits.

    Args:
        trainer: a ``popdist_emu.Trainer`` (functional or offline).
        batch: one call's batch or its shapes (``jax.ShapeDtypeStruct`` leaves), laid out
            ``[device_iterations, gradient_accumulation, replication_factor, micro_batch,
            *sample]`` as ``Trainer.step`` takes it.
        infeed_stats: ``Infeed.stats()`` of a run (or of a sample of its batches); when
            given, the host bytes per micro-batch are the ones the infeed delivered (e.g.
            after ``compress``) instead of the batch's shapes, and the CPU its workers spent
            per sample is the host's share of the step.
        host: measured host figures (``hardware.StepProfile``'s ``host_*`` fields), e.g.
            from a PopTorch data loader; applied with ``infeed_stats``' before any
            ``poprun-emu-scaling`` point is evaluated, so every point includes them.
        system: system name overriding ``POPDIST_EMU_SYSTEM``; None reads the environment.
        name: the model's name in the reports.
        environ: the environment to read (default ``os.environ``).

    Returns:
        The ``hardware.StepSimulation`` (time, phases, memory, timeline).

    Raises:
        hardware.OutOfMemoryError: the step does not fit in IPU memory; the message starts
            with Poplar's ``Out of memory:`` and lists the categories and remedies.
        hardware.SystemSelectionError: unknown system, or too small for the job.
    """
    environ = os.environ if environ is None else environ
    opts = trainer.options
    figures = dict(host or {})
    if infeed_stats is not None:
        figures |= infeed_figures(
            infeed_stats,
            opts.device_iterations,
            opts.gradient_accumulation,
            _micro_batch(batch),
            opts.layout.num_local_replicas,
        )
    if trainer.pipeline is not None:
        # Model parallelism: each stage profiled from its own compiled programs.
        return simulate_pipeline(
            trainer,
            batch,
            system=_system(system, environ),
            environ=environ,
            name=name,
            host=figures,
        )
    return simulate_profile(
        dataclasses.replace(trainer.profile(batch, name=name), **figures),
        layout=opts.layout,
        prefetch_depth=int(opts.prefetch_depth),
        system=system,
        environ=environ,
        relayout=trainer_relayout(trainer, batch),
    )


def _micro_batch(batch: Any) -> int:
    """Samples per micro-batch of a call's batch (its first leaf's fourth axis)."""
    return int(jax.tree_util.tree_leaves(batch)[0].shape[3])


def simulate_profile(
    profile: hardware.StepProfile,
    *,
    layout: hardware.ReplicaLayout | None = None,
    num_total_replicas: int | None = None,
    prefetch_depth: int | None = None,
    system: str | None = None,
    environ: Mapping[str, str] | None = None,
    relayout: Relayout | None = None,
) -> hardware.StepSimulation:
    """``simulate`` for a step already profiled (``Trainer.profile``, ``profile_programs`` or
    ``profile_step``), e.g. without a Trainer, or one profile over many layouts.

    Args:
        profile: one replica's step.
        layout: the job's layout (e.g. ``Options.layout``); None takes the launcher's.
        num_total_replicas: with no ``layout``, replicas of the job on one instance outside
            PopRun; None takes the launcher's layout.
        prefetch_depth: the infeed's prefetch depth; None is the hardware model's default.
        system: system name overriding ``POPDIST_EMU_SYSTEM``; None reads the environment.
        environ: the environment to read (default ``os.environ``).
        relayout: for ``poprun-emu-scaling``: the profile fields that depend on the layout
            (``trainer_relayout``); None when none do.

    Raises:
        hardware.OutOfMemoryError: as ``simulate``.
        hardware.SystemSelectionError: unknown system, or too small for the job.
    """
    environ = os.environ if environ is None else environ
    # poprun-emu-scaling: every point of a sweep from this one profile (no-op otherwise).
    answer_request(profile, prefetch_depth=prefetch_depth, environ=environ, relayout=relayout)
    if layout is None:
        layout = (
            InstanceEnvironment.from_environ(environ).layout
            if num_total_replicas is None
            else job_layout(num_total_replicas, environ)
        )
    spec = simulated_system(layout.num_ipus, system, environ)
    return _checked(profile, layout, spec, prefetch_depth, None)


def simulated_system(
    num_ipus: int, system: str | None = None, environ: Mapping[str, str] | None = None
) -> hardware.SystemSpec:
    """The IPU-POD a simulation of a job on ``num_ipus`` IPUs runs on.

    What ``simulate`` picks: ``system`` when given, else ``poprun-emu --system`` (read from
    the environment now), else the smallest default system with that many IPUs. A program
    sizes what it asks of one IPU against ``simulated_system(n).ipu`` before compiling.

    Raises:
        hardware.SystemSelectionError: no such system, or it has fewer than ``num_ipus``.
    """
    environ = os.environ if environ is None else environ
    return hardware.select_system(_system(system, environ), num_ipus)


def _system(system: str | None, environ: Mapping[str, str]) -> str:
    """The ``--system`` name: the one given, else ``POPDIST_EMU_SYSTEM`` alone (a run with
    an explicit layout needs none of PopRun's layout variables, so none is parsed)."""
    return environ.get(ENV_SYSTEM, "") if system is None else system


def with_infeed_stats(
    simulation: hardware.StepSimulation, stats: InfeedStats
) -> hardware.StepSimulation:
    """The same step with what the infeed measured: the host bytes per micro-batch it
    delivered and the CPU its workers spent per sample preparing them.

    A functional run knows what crossed the host link (after ``compress``, say), which the
    batch's shapes may overstate, and what preparing a sample costs the host
    (``hardware._host_compute`` scales it to the POD's hosts); offline there is no infeed
    and the shapes stand.

    Raises:
        hardware.OutOfMemoryError: as ``simulate``.
    """
    p, local = simulation.profile, simulation.layout.num_local_replicas
    figures = infeed_figures(
        stats, p.device_iterations, p.gradient_accumulation, p.micro_batch_size, local
    )
    return with_host_figures(simulation, **figures)


def infeed_figures(
    stats: InfeedStats,
    device_iterations: int,
    gradient_accumulation: int,
    micro_batch_size: int,
    local_replicas: int,
) -> dict[str, Any]:
    """``hardware.StepProfile``'s host fields from what an infeed measured: the host bytes
    per micro-batch of one replica it delivered, and its workers' CPU per sample (they
    prepare items ahead of the consumer; the first item is left out when there are others).
    One infeed item is one call: ``device_iterations x gradient_accumulation`` micro-batches
    for each of the instance's replicas."""
    if stats.items <= 0:
        return {}
    per_item = device_iterations * gradient_accumulation * local_replicas  # micro-batches
    figures: dict[str, Any] = {}
    if stats.bytes > 0:
        figures["host_bytes_per_micro_batch"] = round(stats.bytes / (stats.items * per_item))
    # The first item pays one-time costs (first calls, caches): left out when others exist.
    cpu, items = stats.produce_cpu_seconds, stats.items
    if items > 1:
        cpu, items = cpu - stats.first_cpu_seconds, items - 1
    if cpu > 0:
        figures["host_cpu_seconds_per_sample"] = cpu / (items * per_item * micro_batch_size)
        figures["host_workers"] = stats.workers
        figures["host_prefetch"] = True
    return figures


def with_host_figures(
    simulation: hardware.StepSimulation, **figures: Any
) -> hardware.StepSimulation:
    """The same step with the host's measured figures (``hardware.StepProfile``'s
    ``host_bytes_per_micro_batch``, ``host_cpu_seconds_per_sample``, ``host_workers``,
    ``host_prefetch``) simulated again.

    Raises:
        hardware.OutOfMemoryError: as ``simulate``.
    """
    profile = dataclasses.replace(simulation.profile, **figures)
    if profile == simulation.profile:
        return simulation
    if simulation.pipeline is not None:
        return with_profile(simulation, profile)
    return _checked(
        profile,
        simulation.layout,
        simulation.system,
        simulation.prefetch_depth,
        simulation.parameters,
    )


def _checked(
    profile: hardware.StepProfile,
    layout: hardware.ReplicaLayout,
    system: hardware.SystemSpec,
    prefetch_depth: int | None,
    parameters: hardware.ModelParameters | None,
) -> hardware.StepSimulation:
    """``hardware.simulate_step`` with the planner's warnings, then Poplar's memory check."""
    depth = {} if prefetch_depth is None else {"prefetch_depth": prefetch_depth}
    simulation = hardware.simulate_step(profile, layout, system, parameters=parameters, **depth)
    print_planner_warnings(simulation)  # PopLibs' phase-two warnings, before any refusal
    # Poplar refuses to compile a graph that does not fit; so does the emulator.
    hardware.check_memory(simulation)
    return simulation


def report_simulation(
    simulation: hardware.StepSimulation,
    *,
    report_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
    file: Any = None,
    instance_index: int | None = None,
    command: str | None = None,
) -> str | None:
    """From instance 0: prints the short summary and writes the reports, if asked for.

    Args:
        simulation: what ``simulate`` returned.
        report_dir: directory for ``summary.json`` and ``trace.json``; None reads
            ``POPDIST_EMU_REPORT_DIR`` (``--report-dir``), where empty means no files.
        environ: the environment to read (default ``os.environ``).
        file: where the summary is printed (default ``sys.stdout``).
        instance_index: this instance's index (e.g. ``Options.instance_index``); None reads
            PopDist's from the environment.
        command: the command line the reports name; None reads the launcher's
            (``POPDIST_EMU_COMMAND``) when ``report_dir`` is read from the environment too,
            else the program's own.

    Returns:
        The report directory written, or None (no directory asked for, or not instance 0).
    """
    environ = os.environ if environ is None else environ
    if instance_index is None:
        instance_index = InstanceEnvironment.from_environ(environ).instance
    directory = environ.get(ENV_REPORT_DIR, "") if report_dir is None else report_dir
    # The launcher's job directory carries the instances' host timelines to instance 0;
    # a call given its report directory reads nothing from the environment.
    job_dir = environ.get(ENV_JOB_DIR, "") if report_dir is None else ""
    if instance_index != 0:
        if directory:
            publish(job_dir, instance_index)
        return None
    print(format_summary(simulation), file=file or sys.stdout, flush=True)
    if not directory:
        return None
    if command is None:
        command = environ.get(ENV_COMMAND, "") if report_dir is None else ""
    host, missing = collect(job_dir, 0)
    return str(write_reports(simulation, directory, run_info(command), host, missing))
