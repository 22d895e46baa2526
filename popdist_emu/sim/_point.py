"""Every layout of a scaling sweep from ONE compiled per-replica step.

``poprun-emu-scaling`` runs the program once per series, as ``poprun-emu --offline-mode`` of
the series' first valid point, with ``POPDIST_EMU_SCALING_REQUEST`` naming a JSON request
file that lists every point (the contract in ``popdist_emu._sweep``, shared with the CLI).
When the program reaches ``popdist_emu.simulate`` (or
``simulate_profile``), :func:`answer_request` evaluates all the points in-process from the
one profile and writes the results atomically to the file the request names; the program
then goes on with its own run as usual. The per-replica program does not change with the
replica count, so only what depends on the layout is re-derived per point:

- the gradient accumulation (strong scaling fixes the global batch, so each point's
  accumulation is ``global_batch / (replicas x micro_batch)``);
- the system (``--system``, or the smallest Mk2/Bow POD that holds the job);
- the collectives of the reduce-and-update stage and the RTS sharding domain, which depend
  on the replica and instance counts (``relayout``, see :func:`trainer_relayout`).

Each point's result is exactly what a single ``poprun-emu --offline-mode`` run of that
configuration writes to ``summary.json`` (the same ``_report.summary``), plus the collective
time split by link tier.

Interface with the runtime (kept narrow on purpose): ``_simulation.simulate_profile`` and,
for a pipelined replica, ``_pipeline_profile.simulate_pipeline`` call :func:`answer_request`
once, handing it ``trainer_relayout(trainer, batch)`` (and the pipeline its stages'
simulator, so the bubble is one more phase of every point).

References:
    Graphcore PopRun user guide, ``--offline-mode``; Memory and Performance Optimisation on
    the IPU, section 7.6 ("Batch size and gradient accumulation count").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import hardware
from contract import REQUEST_VARIABLE, SweepPoint, read_request, write_atomically
from popdist_emu.reports import summary
from popdist_emu.runtime import Trainer

TIER_TRACKS = {"ipu_links": "IPU-Links", "gw_links": "GW-Links"}

Relayout = Callable[[hardware.ReplicaLayout], dict[str, Any]]
# ``simulator(profile, layout, system, prefetch_depth=depth)``: the step of one point; a pipelined
# replica's (``_pipeline_profile``) closes over its stages, the default is data parallel.
Simulator = Callable[..., hardware.StepSimulation]


def trainer_relayout(trainer: Trainer, batch: Any) -> Relayout:
    """Profile fields of ``trainer``'s step that depend on the layout, for any layout.

    The reduce-and-update stage's records carry the method gcl resolves for a group's size,
    so even the plain all-reduce is re-recorded for each layout's replica count. With RTS the
    sharding plan, hence the reduce-scatter, the all-gathers and the sharding domain, also
    depend on the replica and instance counts; the trainer re-plans them exactly as a
    trainer of that layout plans them offline (``Trainer.layout_collectives``).

    Returns:
        ``relayout(layout) -> {"collectives": ..., "sharding_domain": ...}``; it raises
        ``popdist_emu.ShardingError`` for a layout the plan refuses.
    """

    def relayout(layout: hardware.ReplicaLayout) -> dict[str, Any]:
        step = trainer.layout_collectives(batch, layout)
        return {"collectives": step.collectives, "sharding_domain": step.sharding_domain}

    return relayout


def _link_tiers(simulation: hardware.StepSimulation) -> dict[str, float]:
    """Seconds per step the collectives spend on each link tier (from the timeline)."""
    return {
        tier: sum(e.duration for e in simulation.events if e.track == track)
        for tier, track in TIER_TRACKS.items()
    }


def accumulation_for(global_batch: int, replicas: int, micro_batch_size: int) -> int:
    """Gradient accumulation giving ``global_batch = replicas x micro_batch x accumulation``.

    Raises:
        ValueError: the global batch is not a multiple of ``replicas x micro_batch``.
    """
    per_update = replicas * micro_batch_size
    if global_batch < per_update or global_batch % per_update:
        raise ValueError(
            f"--global-batch {global_batch} is not a multiple of {replicas} replicas x "
            f"micro-batch {micro_batch_size} = {per_update}: pick a global batch that is."
        )
    return global_batch // per_update


def evaluate_point(
    profile: hardware.StepProfile,
    point: SweepPoint,
    *,
    prefetch_depth: int | None = None,
    relayout: Relayout | None = None,
    simulator: Simulator | None = None,
) -> dict[str, Any]:
    """One point of the sweep: ``summary.json``'s content for that layout, or why not.

    Args:
        profile: the compiled per-replica step (of the program's own layout).
        point: the layout, its system and, for strong scaling, its global batch (the
            accumulation follows from it; None keeps the profile's accumulation).
        prefetch_depth: the infeed's prefetch depth (None: the hardware model's default).
        relayout: layout-dependent profile fields (see :func:`trainer_relayout`).
        simulator: how a layout's step is simulated; default ``hardware.simulate_step``
            (a pipelined replica passes its stages' schedule, whose bubble is then a phase).

    Returns:
        ``{"status": "ok" | "out_of_memory" | "invalid", "reason": str, "summary": dict,
        "link_tiers": dict}``; ``summary`` is absent for an invalid point.
    """
    try:
        layout = point.layout()
        spec = hardware.select_system(point.system, layout.num_ipus)
        changes = dict(relayout(layout)) if relayout is not None else {}
        if point.global_batch:
            changes["gradient_accumulation"] = accumulation_for(
                point.global_batch, layout.num_replicas, profile.micro_batch_size
            )
        point_profile = profile.replace(**changes) if changes else profile
        depth = hardware.DEFAULT_PREFETCH_DEPTH if prefetch_depth is None else prefetch_depth
        simulation = (simulator or hardware.simulate_step)(
            point_profile, layout, spec, prefetch_depth=depth
        )
    except (ValueError, hardware.SystemSelectionError) as error:
        return {"status": "invalid", "reason": str(error).splitlines()[0]}
    result = {
        "status": "ok",
        "reason": "",
        "summary": summary(simulation),
        "link_tiers": _link_tiers(simulation),
    }
    try:
        # Poplar refuses a graph that does not fit; the sweep keeps the point and says why.
        if getattr(simulation, "pipeline", None) is not None:
            hardware.check_pipeline_memory(simulation)  # names the IPU and stage
        else:
            hardware.check_memory(simulation)
    except hardware.OutOfMemoryError as error:
        result.update(status="out_of_memory", reason=str(error).splitlines()[0])
    return result


def answer_request(
    profile: hardware.StepProfile,
    *,
    prefetch_depth: int | None,
    environ: Mapping[str, str],
    relayout: Relayout | None = None,
    simulator: Simulator | None = None,
) -> None:
    """If ``poprun-emu-scaling`` asked for a sweep, evaluates its points and writes them.

    A no-op unless ``POPDIST_EMU_SCALING_REQUEST`` names a request file. The request is
    answered once per process (a program that simulates twice answers the first time).
    """
    path = environ.get(REQUEST_VARIABLE, "")
    if not path or path in _ANSWERED:
        return
    _ANSWERED.add(path)
    todo, result_path = read_request(path)
    points = []
    for point in todo:
        start = time.perf_counter()
        result = evaluate_point(
            profile, point, prefetch_depth=prefetch_depth, relayout=relayout, simulator=simulator
        )
        result["evaluation_seconds"] = time.perf_counter() - start
        points.append(result)
    answer = {
        "model": profile.name,
        "micro_batch_size": profile.micro_batch_size,
        "gradient_accumulation": profile.gradient_accumulation,
        "device_iterations": profile.device_iterations,
        "points": points,
    }
    write_atomically(result_path, json.dumps(answer) + "\n")


_ANSWERED: set[str] = set()
