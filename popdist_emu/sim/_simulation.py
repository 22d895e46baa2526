"""The glue between a run and the hardware model: profile, simulate, check memory, report.

Every run, functional or offline, plain or pipelined, reports through the same two calls,
so the simulated step of a configuration depends only on its shapes and layout, never on
whether the numerics ran:

    simulation = popdist_emu.simulate(trainer, batch_or_shapes)  # OutOfMemoryError if too big
    popdist_emu.report_simulation(simulation, trainer.options)  # instance 0 reports

``simulate`` profiles the replica the trainer runs (``profile_replica``: one stage for a
data-parallel trainer, one per pipeline stage otherwise), answers a ``poprun-emu-scaling``
sweep if the job carries one, and takes the one checked path (:func:`checked_step`): the
hardware model's step, PopLibs' planner warnings, then Poplar's memory check, as Poplar
refuses at compile time a graph that does not fit. It is deterministic and needs no
communication, so every instance may call it and they all agree. Nothing here reads the
environment: the job (its layout, system, prefetch depth, sweep request, report directory
and this instance) comes from the caller's ``Options``, resolved once at the program's entry.

References:
    Graphcore PopRun user guide: ``--offline-mode`` (compile only) and the launcher's
    environment; Poplar's ``Out of memory`` graph-compile error.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import IO, Any

import jax

import hardware
from popdist_emu._host_timeline import collect, publish
from popdist_emu._options import Options
from popdist_emu.data import InfeedStats
from popdist_emu.reports import format_summary, run_info, write_reports
from popdist_emu.runtime import Trainer
from popdist_emu.sim._checked import checked_step
from popdist_emu.sim._point import Relayout, answer_request, trainer_relayout
from popdist_emu.sim._replica_profile import profile_replica, weights_bound


def simulated_system(num_ipus: int, system: str = "") -> hardware.SystemSpec:
    """The IPU-POD a job on ``num_ipus`` IPUs is simulated on: ``system`` (``--system``,
    ``Options.system``) when given, else the smallest default system with that many IPUs.
    A program sizes what it asks of one IPU against ``simulated_system(n, opts.system).ipu``
    before compiling.

    Raises:
        hardware.SystemSelectionError: no such system, or it has fewer than ``num_ipus``.
    """
    return hardware.select_system(system, num_ipus)


def simulate_replica(
    replica: hardware.ReplicaModel | hardware.StepProfile,
    options: Options,
    *,
    system: str | None = None,
    relayout: Relayout | None = None,
) -> hardware.StepSimulation:
    """A replica already profiled, simulated for the job ``options`` describe (for another
    job, ``Options(layout=...)``): the sweep ``options.scaling_request`` names is answered
    from it first, then the checked path. ``simulate_profile`` is the same function.

    Args:
        replica: the replica (``profile_replica``), or a step profile (``profile_step``,
            ``profile_programs``, ``Trainer.profile``): the data-parallel replica of one
            compiled micro-step.
        options: the job: its layout, system, prefetch depth, sweep request and
            calibration family (``Options.calibration_family``).
        system: a system name overriding ``options.system``.
        relayout: for ``poprun-emu-scaling``: the profile fields that depend on the layout
            (``trainer_relayout``); None when none do.
    """
    model = hardware.as_replica(replica)
    depth = int(options.prefetch_depth)
    # The fitted parameters, weighed by the program's structure; a family's whole-program
    # values only when the user named one (--calibration-family), never from the name.
    # --calibrate-from's refit, when the job has one (Options.calibration_file).
    parameters = hardware.load_parameters(
        options.calibration_file or None, family=options.calibration_family
    )
    if options.scaling_request:  # every point of a sweep from this one replica
        answer_request(
            model,
            options.scaling_request,
            prefetch_depth=depth,
            relayout=relayout,
            parameters=parameters,
        )
    spec = simulated_system(options.layout.num_ipus, options.system if system is None else system)
    return checked_step(
        model,
        options.layout,
        spec,
        prefetch_depth=depth,
        parameters=parameters,
        warnings=sys.stderr,
    )


def simulate(
    trainer: Trainer,
    batch: Any,
    *,
    infeed_stats: InfeedStats | None = None,
    infeed_micro_batch_size: int | None = None,
    host: Mapping[str, float] | None = None,
    system: str | None = None,
    name: str = "model",
) -> hardware.StepSimulation:
    """Simulates one step of ``trainer`` on the job's IPU system and checks that it fits.

    The job is the trainer's ``Options`` (its layout, ``system``, ``prefetch_depth`` and
    ``scaling_request``), so an explicit layout simulates as that job wherever it runs.

    Args:
        trainer: a ``popdist_emu.Trainer`` (functional or offline).
        batch: one call's batch or its shapes (``jax.ShapeDtypeStruct`` leaves), laid out
            ``[device_iterations, gradient_accumulation, replication_factor, micro_batch,
            *sample]`` as ``Trainer.step`` takes it.
        infeed_stats: ``Infeed.stats()`` of a run (or of a sample of its batches); when
            given, the host bytes per micro-batch are the ones the infeed delivered (e.g.
            after ``compress``) instead of the batch's shapes, and the CPU its workers spent
            per sample is the host's share of the step.
        infeed_micro_batch_size: the micro-batch ``infeed_stats`` were measured at, when
            they are of a bounded sample of a larger micro-batch (offline sizing): see
            :func:`with_infeed_stats`.
        host: measured host figures (``hardware.StepProfile``'s ``host_*`` fields), e.g.
            from a PopTorch data loader; applied with ``infeed_stats``' before any
            ``poprun-emu-scaling`` point is evaluated, so every point includes them.
        system: a system name overriding ``trainer.options.system``.
        name: the model's name in the reports.

    Returns:
        The ``hardware.StepSimulation`` (time, phases, memory, timeline).

    Raises:
        hardware.OutOfMemoryError: the step does not fit in IPU memory; the message starts
            with Poplar's ``Out of memory:`` and lists the categories and remedies.
        hardware.SystemSelectionError: unknown system, or too small for the job.
    """
    opts = trainer.options
    figures = dict(host or {})
    if infeed_stats is not None:
        micro = int(jax.tree_util.tree_leaves(batch)[0].shape[3])  # samples per micro-batch
        figures |= infeed_figures(
            infeed_stats,
            opts.device_iterations,
            opts.gradient_accumulation,
            micro if infeed_micro_batch_size is None else infeed_micro_batch_size,
            opts.layout.num_local_replicas,
            sized=micro,
        )
    if not opts.scaling_request:
        # Weights (or a plain step's stream buffers) alone too large: refused before the
        # step compiles. Under poprun-emu-scaling every point's own check decides (RTS may
        # fit a larger job).
        spec = simulated_system(opts.layout.num_ipus, opts.system if system is None else system)
        bound = hardware.simulate_step(weights_bound(trainer, batch, name=name), opts.layout, spec)
        hardware.check_memory(bound)
    model = profile_replica(trainer, batch, name=name, host=figures)
    return simulate_replica(model, opts, system=system, relayout=trainer_relayout(trainer, batch))


simulate_profile = simulate_replica  # its name for a step profile (``profile_step``)


def with_infeed_stats(
    simulation: hardware.StepSimulation, stats: InfeedStats, micro_batch_size: int | None = None
) -> hardware.StepSimulation:
    """The same step with what the infeed measured: the host bytes per micro-batch it
    delivered and the CPU its workers spent per sample preparing them.

    A functional run knows what crossed the host link (after ``compress``, say), which the
    batch's shapes may overstate, and what preparing a sample costs the host
    (``hardware._host_compute`` scales it to the POD's hosts); offline there is no infeed
    and the shapes stand.

    Args:
        micro_batch_size: the micro-batch the infeed delivered, when it was a bounded sample
            of a larger one (offline sizing measures the host on a few thousand samples,
            not on a micro-batch of millions): the CPU per sample carries over, and the
            bytes per micro-batch scale to the profile's micro-batch.

    Raises:
        hardware.OutOfMemoryError: as ``simulate``.
    """
    p, local = simulation.profile, simulation.layout.num_local_replicas
    sampled = p.micro_batch_size if micro_batch_size is None else micro_batch_size
    figures = infeed_figures(
        stats,
        p.device_iterations,
        p.gradient_accumulation,
        sampled,
        local,
        sized=p.micro_batch_size,
    )
    return with_host_figures(simulation, **figures)


def infeed_figures(
    stats: InfeedStats,
    device_iterations: int,
    gradient_accumulation: int,
    micro_batch_size: int,
    local_replicas: int,
    sized: int | None = None,
) -> dict[str, float]:
    """``hardware.StepProfile``'s host fields from what an infeed measured: the host bytes
    per micro-batch of one replica it delivered, and its workers' CPU per sample (they
    prepare items ahead of the consumer; the first item is left out when there are others).
    One infeed item is one call: ``device_iterations x gradient_accumulation`` micro-batches
    for each of the instance's replicas. ``sized``: the micro-batch being sized when the
    infeed delivered a bounded sample of ``micro_batch_size`` (the bytes scale to it)."""
    if stats.items <= 0:
        return {}
    per_item = device_iterations * gradient_accumulation * local_replicas  # micro-batches
    scale = (sized or micro_batch_size) / micro_batch_size
    figures: dict[str, float] = {}
    if stats.bytes > 0:
        figures["host_bytes_per_micro_batch"] = round(
            stats.bytes * scale / (stats.items * per_item)
        )
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
    simulation: hardware.StepSimulation, **figures: float
) -> hardware.StepSimulation:
    """The same step with the host's measured figures (``hardware.StepProfile``'s
    ``host_bytes_per_micro_batch``, ``host_cpu_seconds_per_sample``, ``host_workers``,
    ``host_prefetch``) simulated again (its planner warnings were printed the first time).

    Raises:
        hardware.OutOfMemoryError: as ``simulate``.
    """
    profile = simulation.profile.replace(**figures)
    if profile == simulation.profile:
        return simulation
    return checked_step(
        simulation.model.replace(profile=profile),
        simulation.layout,
        simulation.system,
        prefetch_depth=simulation.prefetch_depth,
        parameters=simulation.parameters,
    )


def report_simulation(
    simulation: hardware.StepSimulation,
    options: Options,
    *,
    report_dir: str | None = None,
    file: IO[str] | None = None,
) -> str | None:
    """From instance 0 of the job ``options`` describe: prints the short summary and writes
    the reports to ``options.report_dir`` (``--report-dir``), if any.

    Args:
        simulation: what ``simulate`` returned.
        options: the job: this instance's index, its report directory, the launcher's job
            directory (which carries the instances' host timelines to instance 0) and the
            command line the reports name (the program's own when empty).
        report_dir: a directory overriding ``options.report_dir``.
        file: where the summary is printed (default ``sys.stdout``).

    Returns:
        The report directory written, or None (no directory asked for, or not instance 0).
    """
    directory = options.report_dir if report_dir is None else report_dir
    if options.instance_index != 0:
        if directory:
            publish(options.job_dir, options.instance_index)
        return None
    print(format_summary(simulation), file=file or sys.stdout, flush=True)
    if not directory:
        return None
    host, missing = collect(options.job_dir, 0)
    return str(write_reports(simulation, directory, run_info(options.command), host, missing))
