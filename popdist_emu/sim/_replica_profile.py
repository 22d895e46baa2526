"""A trainer's replica as the hardware model sees it: ``profile_replica`` and its bound.

One function turns any trainer into a ``hardware.ReplicaModel``: a data-parallel trainer
gives one stage, its compiled micro-step (``Trainer.profile``) on IPU 0; a trainer with an
execution strategy gives one stage per stage of its pipeline, each from its own compiled
forward and backward (``popdist_emu.sim._stages``), and a replica-wide profile built by the
one builder (``popdist_emu.programs.build_step_profile``) from the stages' summed counts,
the trainer's compiled update, its step shapes and its collectives. :func:`weights_bound`
is the same replica with nothing measured yet: only what the stages' weights, optimiser
state and gradients hold, from shapes alone, so a model far too large for its IPUs is
refused before XLA compiles anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import hardware
from popdist_emu.pipeline import Pipeline
from popdist_emu.programs import (
    ProgramCounts,
    StepSettings,
    StepShapes,
    build_step_profile,
    xla_cost,
)
from popdist_emu.runtime import Trainer
from popdist_emu.sim._stages import profile_stages, stage_weights, summed_counts


def _settings(
    trainer: Trainer, shapes: StepShapes, batch: Any, name: str, compiled: bool = True
) -> StepSettings:
    """The replica's run settings: the trainer's Options, its update's collectives (none
    unless ``compiled``: a bound made before compiling prices no collective) and RTS
    domain, and its pipeline's recomputation (a data-parallel step measures its own
    activations, ``jax.checkpoint`` included, so it stashes as it runs)."""
    pipeline = trainer.pipeline
    return StepSettings.from_options(
        trainer.options,
        micro_batch_size=shapes.micro_batch_size,
        collectives=trainer.compile(batch).collectives if compiled else (),
        sharding_domain=trainer.sharding_domain,
        recomputation=pipeline.recomputation if pipeline is not None else False,
        name=name,
    )


def _model(
    trainer: Trainer, profile: hardware.StepProfile, stages: tuple[hardware.StageProfile, ...]
) -> hardware.ReplicaModel:
    pipeline = trainer.pipeline
    if pipeline is None:
        return hardware.ReplicaModel(profile, stages)
    return hardware.ReplicaModel(
        profile, stages, pipeline.strategy.strategy, pipeline.strategy.schedule
    )


def profile_replica(
    trainer: Trainer,
    batch: Any,
    *,
    name: str = "model",
    host: Mapping[str, float] | None = None,
) -> hardware.ReplicaModel:
    """The replica ``trainer`` runs, profiled from the programs it compiles for ``batch``.

    Args:
        trainer: a ``popdist_emu.Trainer``, functional or offline.
        batch: one call's batch or its shapes.
        name: the model's name in reports.
        host: measured host figures (``hardware.StepProfile``'s ``host_*`` fields).
    """
    figures = dict(host or {})
    pipeline = trainer.pipeline
    if pipeline is None:
        profile = trainer.profile(batch, name=name).replace(**figures)
        return hardware.ReplicaModel.data_parallel(profile)
    shapes = trainer.step_shapes(batch)
    stages = profile_stages(pipeline, shapes, partials_type=trainer.options.partials_type)
    counts = ProgramCounts(
        grad=summed_counts(stages),
        update=xla_cost(trainer.compile(batch).update.compiled),
        num_ops=sum(s.num_ops for s in stages),
        code_ops=sum(s.code_ops for s in stages),
        activation_bytes=sum(s.activation_bytes for s in stages),
        temporary_bytes=max(s.temporary_bytes for s in stages),
    )
    profile = build_step_profile(
        counts,
        _settings(trainer, shapes, batch, name),
        params=shapes.params,
        opt_state=shapes.opt_state,
        micro_batch=shapes.micro_batch,
        gradient_bytes=shapes.gradient_bytes,
    )
    return _model(trainer, profile.replace(**figures), stages)


def weights_bound(trainer: Trainer, batch: Any, *, name: str = "model") -> hardware.ReplicaModel:
    """The replica with nothing measured: each stage's weights, optimiser state and
    gradients, and the host's stream buffers of a micro-batch, from ``batch``'s shapes
    alone (no counts, no activations), a lower bound on what its IPUs hold before anything
    is compiled (compiling a micro-batch of millions takes minutes)."""
    pipeline: Pipeline | None = trainer.pipeline
    shapes = trainer.step_shapes(batch, compile=pipeline is not None)
    settings = _settings(trainer, shapes, batch, name, compiled=pipeline is not None)
    if pipeline is None:
        profile = build_step_profile(
            ProgramCounts(),
            settings,
            params=shapes.params,
            opt_state=shapes.opt_state,
            micro_batch=shapes.micro_batch,
            gradient_bytes=shapes.gradient_bytes,
        )
        return hardware.ReplicaModel.data_parallel(profile)
    profile = build_step_profile(ProgramCounts(), settings)
    return _model(trainer, profile, stage_weights(pipeline, shapes))
