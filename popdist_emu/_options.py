"""Training options with PopTorch's concepts and names, holding the job's replica layout.

One frozen value decides the shape of a step: how many local replicas, how many micro-batches
are accumulated, how many steps one call runs, what a call returns and how gradients are
reduced, and the job's replica layout. The layout is resolved once, when the options are
made: from PopDist's environment by default (so the same options work under ``poprun-emu``
and in a plain process) or given explicitly; a later change of the environment does not
change existing options, and two equal options describe the same job.

References:
    PopTorch User Guide, ``poptorch.Options`` (replicationFactor, deviceIterations,
    outputMode, Training.gradientAccumulation,
    Training.accumulationAndReplicationReductionType); PopART glossary: batch size =
    micro-batch x replication factor x accumulation factor; input layout
    ``[batches_per_step, accl_factor, repl_factor, micro_batch, *sample]``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from hardware import (
    DEFAULT_AVAILABLE_MEMORY_PROPORTION,
    DEFAULT_PREFETCH_DEPTH,
    LayoutError,
    ReplicaLayout,
)
from hardware._planner import PARTIALS_TYPES
from popdist_emu._environment import InstanceEnvironment, offline_mode

OutputMode = Literal["final", "all"]
Reduction = Literal["mean", "sum"]

_OUTPUT_MODES = ("final", "all")
_REDUCTIONS = ("mean", "sum")


def is_offline_mode() -> bool:
    """Whether ``poprun-emu --offline-mode`` started this process: compile, never run.

    In offline mode nothing is computed on data and no collective (no MPI) is called; the
    runtime only lowers and compiles the step from shapes, as PopRun's offline mode compiles
    without attaching to IPUs.
    """
    return offline_mode()


_PARTIALS_TYPES = tuple(PARTIALS_TYPES)


def _check_positive(name: str, value: object, poptorch_name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"Options: `{name}` (PopTorch's {poptorch_name}) must be a positive int, "
            f"got {value!r}; pass e.g. {name}=1."
        )


def _check_available_memory_proportion(value: object) -> None:
    from hardware._planner import proportion_for_ipu

    try:
        proportion_for_ipu(value)  # type: ignore[arg-type]
    except ValueError as error:
        raise ValueError(f"Options: {error}") from None


@dataclasses.dataclass(frozen=True)
class Options:
    """How one training call is shaped, named after ``poptorch.Options``.

    A call of :meth:`Trainer.step` consumes a batch laid out as PopART does,
    ``[device_iterations, gradient_accumulation, replication_factor, micro_batch, *sample]``
    for every leaf, and runs ``device_iterations`` optimiser steps. The global batch of one
    step is ``micro_batch x replication_factor x num_instances x gradient_accumulation``.

    Attributes:
        replication_factor: replicas driven by this instance (PopTorch's replicationFactor,
            which PopDist programs set to ``getNumLocalReplicas()``, the default here).
        gradient_accumulation: micro-batches accumulated per replica before each update.
        device_iterations: optimiser steps run by one call (PopTorch's deviceIterations).
        output_mode: ``"final"`` returns the last step's loss of a call, ``"all"`` one loss
            per step (PopTorch's outputMode Final / All).
        reduction: how gradients are combined over accumulation and replicas, ``"mean"`` or
            ``"sum"`` (PopTorch's accumulationAndReplicationReductionType).
        replicated_tensor_sharding: shard optimiser state over replicas (RTS).
        sharding_domain: replicas an RTS shard spans; None means the default domain.
        offload_optimiser: keep optimiser state in host memory (streamed in for the update).
        prefetch_depth: calls of input the host-IO infeed prepares ahead (at least 1).
        execution_strategy: ``PipelinedExecution(...)`` or ``ShardedExecution(...)`` to run
            a ``BlockModel`` over the replica's IPUs (PopTorch's setExecutionStrategy);
            None runs the loss on one IPU's worth of program.
        recomputation: stages stash only their inputs and recompute their activations in
            the backward pass (the hardware model's stash; see ``_pipeline``).
        layout: the job's replica layout. None (the default) resolves it once, at
            construction: PopRun's layout under ``poprun-emu``, otherwise one instance
            driving ``replication_factor`` replicas.
        instance_index: this instance's index in the layout; None resolves it with the
            layout (PopDist's ``getInstanceIndex()``, or 0 for an explicit layout).
        available_memory_proportion: PopLibs' availableMemoryProportion for the matmuls and
            convolutions of the step, a float for every IPU or PopTorch's per-IPU mapping
            ``{"IPU0": 0.6, "IPU1": 0.4}`` (``setAvailableMemoryProportion``); IPUs left
            out keep the default 0.6. ``popdist_emu.set_available_memory(x, p)`` overrides
            it for one operation.
        partials_type: PopLibs' ``partialsType`` of the matmuls and convolutions, "float"
            (the default) or "half" (PopTorch's ``Precision.setPartialsType(torch.half)``,
            Graphcore's ``enable_half_partials``): half partials halve the planner's
            temporary memory per partial.
    """

    replication_factor: int = None  # type: ignore[assignment]  # resolved in __post_init__
    gradient_accumulation: int = 1
    device_iterations: int = 1
    output_mode: OutputMode = "final"
    reduction: Reduction = "mean"
    replicated_tensor_sharding: bool = False
    sharding_domain: int | None = None
    offload_optimiser: bool = False
    prefetch_depth: int = DEFAULT_PREFETCH_DEPTH
    execution_strategy: object | None = None
    recomputation: bool = False
    available_memory_proportion: float | dict = DEFAULT_AVAILABLE_MEMORY_PROPORTION
    partials_type: str = "float"
    layout: ReplicaLayout = None  # type: ignore[assignment]  # resolved in __post_init__
    instance_index: int = None  # type: ignore[assignment]  # resolved in __post_init__

    def __post_init__(self) -> None:
        self._resolve_layout()
        _check_positive("replication_factor", self.replication_factor, "replicationFactor")
        _check_positive("gradient_accumulation", self.gradient_accumulation, "gradientAccumulation")
        _check_positive("device_iterations", self.device_iterations, "deviceIterations")
        _check_available_memory_proportion(self.available_memory_proportion)
        if self.partials_type not in _PARTIALS_TYPES:
            raise ValueError(
                f"Options: `partials_type` (PopTorch's Precision.setPartialsType) must be one "
                f"of {_PARTIALS_TYPES}, got {self.partials_type!r}."
            )
        if self.output_mode not in _OUTPUT_MODES:
            raise ValueError(
                f"Options: `output_mode` must be one of {_OUTPUT_MODES}, got "
                f"{self.output_mode!r}; use 'final' for the last step's loss or 'all' for "
                f"one loss per step."
            )
        if self.reduction not in _REDUCTIONS:
            raise ValueError(
                f"Options: `reduction` (PopTorch's accumulationAndReplicationReductionType) "
                f"must be one of {_REDUCTIONS}, got {self.reduction!r}."
            )
        if self.sharding_domain is not None:
            _check_positive("sharding_domain", self.sharding_domain, "shardingDomain")
        if isinstance(self.prefetch_depth, bool) or not isinstance(self.prefetch_depth, int):
            raise ValueError(
                f"Options: `prefetch_depth` must be an int, got {self.prefetch_depth!r}."
            )
        if self.prefetch_depth < 1:
            raise ValueError(
                f"Options: `prefetch_depth` must be >= 1 (1 = only the next batch is "
                f"prepared ahead), got {self.prefetch_depth}."
            )

    def _resolve_layout(self) -> None:
        """Fixes ``layout``, ``instance_index`` and ``replication_factor`` once."""
        layout, instance, rf = self.layout, self.instance_index, self.replication_factor
        if rf is not None:
            _check_positive("replication_factor", rf, "replicationFactor")
        if layout is None:
            view = InstanceEnvironment.from_environ()
            if view.popdist_set:
                layout, source = view.layout, "PopRun gave this instance"
                instance = view.instance if instance is None else instance
            else:
                try:
                    layout = dataclasses.replace(view.layout, num_replicas=rf or 1)
                except LayoutError as error:
                    raise ValueError(f"Options: replication_factor={rf}: {error}") from None
                source = None
        else:
            if not isinstance(layout, ReplicaLayout):
                raise ValueError(
                    f"Options: `layout` must be a hardware.ReplicaLayout, got "
                    f"{type(layout).__name__}; pass e.g. ReplicaLayout(num_replicas=8, "
                    f"num_instances=2)."
                )
            source = "the given layout has"
        instance = 0 if instance is None else instance
        if isinstance(instance, bool) or not isinstance(instance, int):
            raise ValueError(f"Options: `instance_index` must be an int, got {instance!r}.")
        if not 0 <= instance < layout.num_instances:
            raise ValueError(
                f"Options: `instance_index` {instance} is outside [0, {layout.num_instances}) "
                f"of the layout's instances."
            )
        local = layout.num_local_replicas
        if rf is not None and rf != local:
            raise ValueError(
                f"Options: `replication_factor` is {rf} but {source} {local} local replicas; "
                f"leave it unset (it defaults to popdist.getNumLocalReplicas()) or pass {local}."
            )
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "instance_index", instance)
        object.__setattr__(self, "replication_factor", local)

    @property
    def num_instances(self) -> int:
        """Instances of the job (1 outside PopRun)."""
        return self.layout.num_instances

    @property
    def num_total_replicas(self) -> int:
        """Replicas over all instances: this instance's replicas times the instances."""
        return self.layout.num_replicas

    @property
    def replica_offset(self) -> int:
        """Global index of this instance's first replica."""
        return self.layout.replica_offset(self.instance_index)

    def global_batch_size(self, micro_batch_size: int) -> int:
        """Samples that one optimiser step consumes over all replicas."""
        return micro_batch_size * self.num_total_replicas * self.gradient_accumulation
