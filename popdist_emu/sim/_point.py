"""Every layout of a scaling sweep from ONE compiled per-replica step.

``poprun-emu-scaling`` runs the program once per series, as ``poprun-emu --offline-mode`` of
the series' first valid point, with ``POPDIST_EMU_SCALING_REQUEST`` naming a JSON request
file that lists every point (the contract in ``contract._sweep``, shared with the CLI; the
program's ``Options.scaling_request``). When the program reaches ``popdist_emu.simulate``
(or ``simulate_profile``), :func:`answer_request` evaluates all the points in-process from
the one replica and writes the results atomically to the file the request names; the
program then goes on with its own run as usual. The per-replica program does not change with the
replica count, so only what depends on the layout is re-derived per point:

- the gradient accumulation (strong scaling fixes the global batch, so each point's
  accumulation is ``global_batch / (replicas x micro_batch)``);
- the system (``--system``, or the smallest Mk2/Bow POD that holds the job);
- the collectives of the reduce-and-update stage and the RTS sharding domain, which depend
  on the replica and instance counts (``relayout``, see :func:`trainer_relayout`).

Each point's result is exactly what a single ``poprun-emu --offline-mode`` run of that
configuration writes to ``summary.json`` (the same ``_report.summary``), plus the collective
time split by link tier.

Interface with the runtime (kept narrow on purpose): ``_simulation.simulate_replica`` calls
:func:`answer_request` once, handing it the replica (one stage or a pipeline's, whose bubble
is then one more phase of every point) and ``trainer_relayout(trainer, batch)``; every point
takes the same checked path as a run (``_simulation.checked_step``).

References:
    Graphcore PopRun user guide, ``--offline-mode``; Memory and Performance Optimisation on
    the IPU, section 7.6 ("Batch size and gradient accumulation count").
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import hardware
from contract import SweepPoint, read_request, write_atomically
from popdist_emu.reports import summary
from popdist_emu.runtime import Trainer
from popdist_emu.sim._checked import check_step

TIER_TRACKS = {"ipu_links": "IPU-Links", "gw_links": "GW-Links"}

# Layout -> the StepProfile fields that depend on it (``StepProfile.replace``'s changes).
Relayout = Callable[[hardware.ReplicaLayout], dict[str, object]]


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

    def relayout(layout: hardware.ReplicaLayout) -> dict[str, object]:
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
    model: hardware.ReplicaModel,
    point: SweepPoint,
    *,
    prefetch_depth: int | None = None,
    relayout: Relayout | None = None,
    parameters: hardware.ModelParameters | None = None,
) -> dict[str, object]:
    """One point of the sweep: ``summary.json``'s content for that layout, or why not.

    Args:
        model: the compiled replica (of the program's own layout): its profile and stages.
        point: the layout, its system and, for strong scaling, its global batch (the
            accumulation follows from it; None keeps the profile's accumulation); its
            ``parameters`` replace those of ``parameters`` by name.
        prefetch_depth: the infeed's prefetch depth (None: the hardware model's default).
        relayout: layout-dependent profile fields (see :func:`trainer_relayout`).
        parameters: the fitted parameters (None: the calibrated ones, weighed by the
            program's structure).

    Returns:
        ``{"status": "ok" | "out_of_memory" | "invalid", "reason": str, "summary": dict,
        "link_tiers": dict}``; ``summary`` is absent for an invalid point.
    """
    depth = hardware.DEFAULT_PREFETCH_DEPTH if prefetch_depth is None else prefetch_depth
    profile = model.profile
    try:
        layout = point.layout()
        spec = hardware.select_system(point.system, layout.num_ipus)
        changes = dict(relayout(layout)) if relayout is not None else {}
        if point.global_batch:
            changes["gradient_accumulation"] = accumulation_for(
                point.global_batch, layout.num_replicas, profile.micro_batch_size
            )
        point_model = model.replace(profile=profile.replace(**changes)) if changes else model
        if point.parameters:  # a probe of the fit's terms (benchmarks/row_features.py)
            base = parameters if parameters is not None else hardware.load_parameters()
            changed: dict[str, Any] = dict(point.parameters)  # unknown names: TypeError
            parameters = dataclasses.replace(base, **changed)
        simulation = hardware.simulate_step(
            point_model, layout, spec, parameters=parameters, prefetch_depth=depth
        )
    except (ValueError, TypeError, hardware.SystemSelectionError) as error:
        return {"status": "invalid", "reason": str(error).splitlines()[0]}
    result: dict[str, object] = {
        "status": "ok",
        "reason": "",
        "summary": summary(simulation),
        "link_tiers": _link_tiers(simulation),
    }
    try:
        # Poplar refuses a graph that does not fit; the sweep keeps the point and says why.
        check_step(simulation)
    except hardware.OutOfMemoryError as error:
        result.update(status="out_of_memory", reason=str(error).splitlines()[0])
    return result


def answer_request(
    model: hardware.ReplicaModel,
    request: str,
    *,
    prefetch_depth: int | None,
    relayout: Relayout | None = None,
    parameters: hardware.ModelParameters | None = None,
) -> None:
    """Evaluates the points of the sweep request file ``request`` (``Options.
    scaling_request``) from ``model`` and writes them where the request says.

    The request is answered once per process (a program that simulates twice answers the
    first time).
    """
    if not request or request in _ANSWERED:
        return
    _ANSWERED.add(request)
    todo, result_path = read_request(request)
    points = []
    for point in todo:
        start = time.perf_counter()
        result = evaluate_point(
            model, point, prefetch_depth=prefetch_depth, relayout=relayout, parameters=parameters
        )
        result["evaluation_seconds"] = time.perf_counter() - start
        points.append(result)
    profile = model.profile
    answer = {
        "model": profile.name,
        "micro_batch_size": profile.micro_batch_size,
        "gradient_accumulation": profile.gradient_accumulation,
        "device_iterations": profile.device_iterations,
        "points": points,
    }
    write_atomically(result_path, json.dumps(answer) + "\n")


_ANSWERED: set[str] = set()
