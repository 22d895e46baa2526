"""The glue between a run and the hardware model: profile, simulate, check memory, report.

Every run, functional or offline, reports through the same two calls, so the simulated step
of a configuration depends only on its shapes and layout, never on whether the numerics ran:

    simulation = popdist_emu.simulate(trainer, batch_or_shapes)  # OutOfMemoryError if too big
    popdist_emu.report_simulation(simulation)  # instance 0 prints and writes the reports

``simulate`` compiles (never runs) one replica's step with ``profile_step``, picks the system
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

import hardware
from popdist_emu._infeed import InfeedStats
from popdist_emu._planner_report import print_planner_warnings
from popdist_emu._profile import profile_step
from popdist_emu._report import format_summary, write_reports

ENV_SYSTEM = "POPDIST_EMU_SYSTEM"
ENV_REPORT_DIR = "POPDIST_EMU_REPORT_DIR"
ENV_INSTANCE_INDEX = "POPDIST_EMU_INSTANCE_INDEX"


def job_layout(num_total_replicas: int, environ: Mapping[str, str]) -> hardware.ReplicaLayout:
    """The job's layout: PopRun's, or, outside PopRun, one instance driving every replica.

    Outside the launcher ``ReplicaLayout.from_environment`` reads one replica, yet a program
    may still drive several (``Options(replication_factor=4)``); the trainer's count wins.
    """
    layout, _ = hardware.ReplicaLayout.from_environment(environ)
    if layout.num_replicas == num_total_replicas:
        return layout
    return hardware.ReplicaLayout(
        num_replicas=num_total_replicas,
        num_instances=1,
        ipus_per_replica=layout.ipus_per_replica,
        hosts=layout.hosts[:1],
    )


def _measured_host_bytes(
    stats: InfeedStats, profile: hardware.StepProfile, local_replicas: int
) -> int | None:
    """Host bytes per micro-batch of one replica that the infeed actually delivered.

    One infeed item is one call: ``device_iterations x gradient_accumulation`` micro-batches
    for each of the instance's replicas.
    """
    if stats.items <= 0 or stats.bytes <= 0:
        return None
    per_item = profile.device_iterations * profile.gradient_accumulation * local_replicas
    return round(stats.bytes / (stats.items * per_item))


def simulate(
    trainer: Any,
    batch: Any,
    *,
    infeed_stats: InfeedStats | None = None,
    system: str | None = None,
    name: str = "model",
    environ: Mapping[str, str] | None = None,
) -> hardware.StepSimulation:
    """Simulates one step of ``trainer`` on the job's IPU system and checks that it fits.

    Args:
        trainer: a ``popdist_emu.Trainer`` (functional or offline).
        batch: one call's batch or its shapes (``jax.ShapeDtypeStruct`` leaves), laid out
            ``[device_iterations, gradient_accumulation, replication_factor, micro_batch,
            *sample]`` as ``Trainer.step`` takes it.
        infeed_stats: ``Infeed.stats()`` of a functional run; when given, the host bytes per
            micro-batch are the ones the infeed delivered (e.g. after ``compress``) instead
            of the batch's shapes.
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
    if getattr(trainer, "pipeline", None) is not None:
        # Model parallelism: each stage profiled from its own compiled programs.
        from popdist_emu._pipeline_profile import simulate_pipeline

        simulation = simulate_pipeline(trainer, batch, system=system, name=name, environ=environ)
        return simulation if infeed_stats is None else with_infeed_stats(simulation, infeed_stats)
    opts = trainer.options
    kwargs = trainer.profile_kwargs(batch)
    profile = profile_step(
        trainer.tree_grad_fn,
        trainer.tree_update_fn,
        **kwargs,
        replicated_tensor_sharding=bool(opts.replicated_tensor_sharding),
        offload_optimizer_state=bool(opts.offload_optimiser),
        sharding_domain=_sharding_domain(trainer),
        name=name,
        available_memory_proportion=getattr(opts, "available_memory_proportion", 0.6),
    )
    simulation = simulate_profile(
        profile,
        num_total_replicas=trainer.num_total_replicas,
        prefetch_depth=int(opts.prefetch_depth),
        system=system,
        environ=environ,
    )
    return simulation if infeed_stats is None else with_infeed_stats(simulation, infeed_stats)


def _sharding_domain(trainer: Any) -> int:
    """Replicas an RTS shard spans, as the trainer resolved it (0 = all replicas)."""
    info = getattr(trainer, "lever_info", None)
    if trainer.options.replicated_tensor_sharding and info is not None:
        return int(info.sharding_domain_size)
    return int(trainer.options.sharding_domain or 0)


def simulate_profile(
    profile: hardware.StepProfile,
    *,
    num_total_replicas: int | None = None,
    prefetch_depth: int | None = None,
    system: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> hardware.StepSimulation:
    """``simulate`` for a step already profiled (``profile_step``), e.g. without a Trainer.

    Args:
        profile: one replica's step.
        num_total_replicas: replicas of the job; None takes the launcher's layout.
        prefetch_depth: the infeed's prefetch depth; None is the hardware model's default.
        system: system name overriding ``POPDIST_EMU_SYSTEM``; None reads the environment.
        environ: the environment to read (default ``os.environ``).

    Raises:
        hardware.OutOfMemoryError: as ``simulate``.
        hardware.SystemSelectionError: unknown system, or too small for the job.
    """
    environ = os.environ if environ is None else environ
    if num_total_replicas is None:
        layout, _ = hardware.ReplicaLayout.from_environment(environ)
    else:
        layout = job_layout(num_total_replicas, environ)
    name_of_system = environ.get(ENV_SYSTEM, "") if system is None else system
    spec = hardware.select_system(name_of_system, layout.num_ipus)
    return _checked(profile, layout, spec, prefetch_depth, None)


def with_infeed_stats(
    simulation: hardware.StepSimulation, stats: InfeedStats
) -> hardware.StepSimulation:
    """The same step with the host bytes per micro-batch the infeed actually delivered.

    A functional run knows what crossed the host link (after ``compress``, say), which the
    batch's shapes may overstate; offline there is no infeed and the shapes stand.

    Raises:
        hardware.OutOfMemoryError: as ``simulate``.
    """
    profile = simulation.profile
    measured = _measured_host_bytes(stats, profile, simulation.layout.num_local_replicas)
    if measured is None or measured == profile.host_bytes_per_micro_batch:
        return simulation
    profile = dataclasses.replace(profile, host_bytes_per_micro_batch=measured)
    if getattr(simulation, "pipeline", None) is not None:
        from popdist_emu._pipeline_profile import with_profile

        return with_profile(simulation, profile)
    return _checked(
        profile,
        simulation.layout,
        simulation.system,
        simulation.prefetch_depth,
        simulation.parameters,
    )


def _checked(profile, layout, system, prefetch_depth, parameters) -> hardware.StepSimulation:
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
) -> str | None:
    """From instance 0: prints the short summary and writes the reports, if asked for.

    Args:
        simulation: what ``simulate`` returned.
        report_dir: directory for ``summary.json`` and ``trace.json``; None reads
            ``POPDIST_EMU_REPORT_DIR`` (``--report-dir``), where empty means no files.
        environ: the environment to read (default ``os.environ``).
        file: where the summary is printed (default ``sys.stdout``).

    Returns:
        The report directory written, or None (no directory asked for, or not instance 0).
    """
    environ = os.environ if environ is None else environ
    if int(environ.get(ENV_INSTANCE_INDEX, "0") or 0) != 0:
        return None
    print(format_summary(simulation), file=file or sys.stdout, flush=True)
    directory = environ.get(ENV_REPORT_DIR, "") if report_dir is None else report_dir
    if not directory:
        return None
    return str(write_reports(simulation, directory))
