"""Training options with PopTorch's concepts and names, and the offline-mode switch.

One frozen value decides the shape of a step: how many local replicas, how many micro-batches
are accumulated, how many steps one call runs, what a call returns and how gradients are
reduced. The replica count that the options do not carry (other instances' replicas) comes
from PopDist, so the same options work under ``poprun-emu`` and in a plain process.

References:
    PopTorch User Guide, ``poptorch.Options`` (replicationFactor, deviceIterations,
    outputMode, Training.gradientAccumulation,
    Training.accumulationAndReplicationReductionType); PopART glossary: batch size =
    micro-batch x replication factor x accumulation factor; input layout
    ``[batches_per_step, accl_factor, repl_factor, micro_batch, *sample]``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from popdist_emu import _popdist_api as popdist

ENV_OFFLINE = "POPDIST_EMU_OFFLINE"

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
    return os.environ.get(ENV_OFFLINE, "") == "1"


def _local_replicas() -> int:
    return popdist.getNumLocalReplicas()


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
        replicated_tensor_sharding: shard optimiser state over replicas (RTS); reserved.
        sharding_domain: replicas an RTS shard spans; None means the default domain.
        offload_optimiser: keep optimiser state in host memory (streamed in for the update).
        prefetch_depth: calls of input the host-IO infeed prepares ahead (at least 1).
        execution_strategy: ``PipelinedExecution(...)`` or ``ShardedExecution(...)`` to run
            a ``BlockModel`` over the replica's IPUs (PopTorch's setExecutionStrategy);
            None runs the loss on one IPU's worth of program.
        recomputation: stages stash only their inputs and recompute their activations in
            the backward pass (the hardware model's stash; see ``_pipeline``).
        available_memory_proportion: PopLibs' availableMemoryProportion for the matmuls and
            convolutions of the step, a float for every IPU or PopTorch's per-IPU mapping
            ``{"IPU0": 0.6, "IPU1": 0.4}`` (``setAvailableMemoryProportion``); IPUs left
            out keep the default 0.6. ``popdist_emu.set_available_memory(x, p)`` overrides
            it for one operation.
    """

    replication_factor: int = dataclasses.field(default_factory=_local_replicas)
    gradient_accumulation: int = 1
    device_iterations: int = 1
    output_mode: OutputMode = "final"
    reduction: Reduction = "mean"
    replicated_tensor_sharding: bool = False
    sharding_domain: int | None = None
    offload_optimiser: bool = False
    prefetch_depth: int = 3
    execution_strategy: object | None = None
    recomputation: bool = False
    available_memory_proportion: float | dict = 0.6

    def __post_init__(self) -> None:
        _check_positive("replication_factor", self.replication_factor, "replicationFactor")
        _check_positive("gradient_accumulation", self.gradient_accumulation, "gradientAccumulation")
        _check_positive("device_iterations", self.device_iterations, "deviceIterations")
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
        _check_available_memory_proportion(self.available_memory_proportion)
        if popdist.isPopdistEnvSet():
            local = popdist.getNumLocalReplicas()
            if self.replication_factor != local:
                raise ValueError(
                    f"Options: `replication_factor` is {self.replication_factor} but PopRun "
                    f"gave this instance {local} local replicas; leave it unset (it defaults "
                    f"to popdist.getNumLocalReplicas()) or pass {local}."
                )

    @property
    def num_instances(self) -> int:
        """Instances of the job (1 outside PopRun)."""
        return popdist.getNumInstances()

    @property
    def num_total_replicas(self) -> int:
        """Replicas over all instances: this instance's replicas times the instances."""
        return self.replication_factor * self.num_instances

    @property
    def replica_offset(self) -> int:
        """Global index of this instance's first replica."""
        return popdist.getInstanceIndex() * self.replication_factor

    def global_batch_size(self, micro_batch_size: int) -> int:
        """Samples that one optimiser step consumes over all replicas."""
        return micro_batch_size * self.num_total_replicas * self.gradient_accumulation
