"""Training options with PopTorch's concepts and names, holding the job's replica layout.

One frozen value decides the shape of a step: how many local replicas, how many micro-batches
are accumulated, how many steps one call runs, what a call returns and how gradients are
reduced, and the job's replica layout. The layout is resolved once, when the options are
made: from PopDist's environment by default (so the same options work under ``poprun-emu``
and in a plain process) or given explicitly; a later change of the environment does not
change existing options, and two equal options describe the same job. Every per-instance
value the runtime needs (the layout, this instance's index, offline mode, the job) is resolved here,
once, so nothing deeper reads the environment again: options built with an explicit layout
describe the job entirely, and the environment is not read at all.

References:
    PopTorch User Guide, ``poptorch.Options`` (replicationFactor, deviceIterations,
    outputMode, Training.gradientAccumulation,
    Training.accumulationAndReplicationReductionType); PopART glossary: batch size =
    micro-batch x replication factor x accumulation factor; input layout
    ``[batches_per_step, accl_factor, repl_factor, micro_batch, *sample]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

from contract import InstanceEnvironment, offline_mode
from hardware import (
    DEFAULT_AVAILABLE_MEMORY_PROPORTION,
    DEFAULT_PREFETCH_DEPTH,
    PARTIALS_TYPES,
    LayoutError,
    ReplicaLayout,
    check_family,
    proportion_for_ipu,
)

OutputMode = Literal["final", "all"]
Reduction = Literal["mean", "sum"]

_OUTPUT_MODES = ("final", "all")
_REDUCTIONS = ("mean", "sum")


def is_offline_mode() -> bool:
    """Whether ``poprun-emu --offline-mode`` started this process: compile, never run.

    In offline mode nothing is computed on data and no collective (no MPI) is called; the
    runtime only lowers and compiles the step from shapes, as PopRun's offline mode compiles
    without attaching to IPUs. This reads the environment now; ``Options().offline`` holds
    the same answer, read once with the layout, and is what the runtime uses.
    """
    return offline_mode()


_PARTIALS_TYPES = tuple(PARTIALS_TYPES)


def _check_positive(name: str, value: object, poptorch_name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"Options: `{name}` (PopTorch's {poptorch_name}) must be a positive int, "
            f"got {value!r}; pass e.g. {name}=1."
        )


def _check_available_memory_proportion(value: float | Mapping[str, float]) -> None:
    try:
        proportion_for_ipu(value)
    except ValueError as error:
        raise ValueError(f"Options: {error}") from None


def _resolve_layout(
    layout: ReplicaLayout | None, instance: int | None, rf: int | None
) -> tuple[ReplicaLayout, int, int, InstanceEnvironment]:
    """``(layout, instance_index, local replicas, the launcher's view)``, the environment
    read at most once.

    A given layout is the job's whole description: neither it nor the instance index nor
    any of the launcher's settings (offline mode, the job directory, the system, the report
    directory, ...) then comes from the environment: the view is the empty one.
    """
    if rf is not None:
        _check_positive("replication_factor", rf, "replicationFactor")
    view = InstanceEnvironment()
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
            source = ""
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
    return layout, instance, local, view


@dataclasses.dataclass(frozen=True, init=False)
class Options:
    """How one training call is shaped, named after ``poptorch.Options``.

    A call of :meth:`Trainer.step` consumes a batch laid out as PopART does,
    ``[device_iterations, gradient_accumulation, replication_factor, micro_batch, *sample]``
    for every leaf, and runs ``device_iterations`` optimiser steps. The global batch of one
    step is ``micro_batch x replication_factor x num_instances x gradient_accumulation``.

    The constructor takes None for ``replication_factor``, ``layout``, ``instance_index`` and
    ``offline`` and resolves them once (see :meth:`__init__`); the fields always hold the
    resolved values, so every reader sees an ``int``, a ``ReplicaLayout`` and a ``bool``.

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
            the backward pass (the hardware model's stash; see ``popdist_emu.pipeline``).
        available_memory_proportion: PopLibs' availableMemoryProportion for the matmuls and
            convolutions of the step, a float for every IPU or PopTorch's per-IPU mapping
            ``{"IPU0": 0.6, "IPU1": 0.4}`` (``setAvailableMemoryProportion``); IPUs left
            out keep the default 0.6. ``popdist_emu.set_available_memory(x, p)`` overrides
            it for one operation.
        partials_type: PopLibs' ``partialsType`` of the matmuls and convolutions, "float"
            (the default) or "half" (PopTorch's ``Precision.setPartialsType(torch.half)``,
            Graphcore's ``enable_half_partials``): half partials halve the planner's
            temporary memory per partial.
        layout: the job's replica layout (IPUs per replica included): what the pipeline,
            the stages and the simulation take, never the environment.
        instance_index: this instance's index in the layout.
        offline: compile only, run nothing (``poprun-emu --offline-mode``).
        job_dir: the launcher's job directory, which names this job among others (one job
            writes a checkpoint directory); "" for a job that is this process alone.
        system: the IPU-POD the job is simulated on (``poprun-emu --system``); "" for the
            smallest Mk2 POD that holds it.
        report_dir: where instance 0 writes the run's reports (``--report-dir``); "" for
            none.
        command: the command line the reports name (``poprun-emu``'s); "" for none.
        scaling_request: the request file of a ``poprun-emu-scaling`` sweep to answer from
            this job's simulated step; "" when none asked.
        calibration_family: a calibrated family whose whole-program parameters the
            simulation uses instead of the structural ones (``poprun-emu
            --calibration-family``, ``hardware.family_names()``); "" lets the program's
            structure weigh every fitted term.
        calibration_file: the calibration file the simulation reads its parameters from
            (``poprun-emu --calibrate-from``'s refit); "" for the packaged one.
    """

    replication_factor: int
    gradient_accumulation: int
    device_iterations: int
    output_mode: OutputMode
    reduction: Reduction
    replicated_tensor_sharding: bool
    sharding_domain: int | None
    offload_optimiser: bool
    prefetch_depth: int
    execution_strategy: object | None
    recomputation: bool
    available_memory_proportion: float | dict[str, float]
    partials_type: str
    layout: ReplicaLayout
    instance_index: int
    offline: bool
    job_dir: str
    system: str
    report_dir: str
    command: str
    scaling_request: str
    calibration_family: str
    calibration_file: str

    def __init__(
        self,
        replication_factor: int | None = None,
        gradient_accumulation: int = 1,
        device_iterations: int = 1,
        output_mode: OutputMode = "final",
        reduction: Reduction = "mean",
        replicated_tensor_sharding: bool = False,
        sharding_domain: int | None = None,
        offload_optimiser: bool = False,
        prefetch_depth: int = DEFAULT_PREFETCH_DEPTH,
        execution_strategy: object | None = None,
        recomputation: bool = False,
        available_memory_proportion: float | dict[str, float] = (
            DEFAULT_AVAILABLE_MEMORY_PROPORTION
        ),
        partials_type: str = "float",
        layout: ReplicaLayout | None = None,
        instance_index: int | None = None,
        offline: bool | None = None,
        job_dir: str | None = None,
        system: str | None = None,
        report_dir: str | None = None,
        command: str | None = None,
        scaling_request: str | None = None,
        calibration_family: str | None = None,
        calibration_file: str | None = None,
    ) -> None:
        """Validates the fields and resolves the per-instance ones, once.

        Args:
            replication_factor: None takes the layout's local replicas
                (``popdist.getNumLocalReplicas()``); a number must equal them.
            layout: None reads it once from PopDist's environment: PopRun's layout under
                ``poprun-emu``, otherwise one instance driving ``replication_factor``
                replicas. A given layout is the whole truth: the environment is not read.
            instance_index: None takes PopDist's ``getInstanceIndex()`` with an environment
                layout, 0 with a given one.
            offline: None takes ``--offline-mode`` from the environment read for the
                layout, False with a given layout.
            job_dir: None takes ``poprun-emu``'s job directory from the environment read
                for the layout, "" (this process is the job) with a given layout.
            system, report_dir, command, scaling_request, calibration_family, calibration_file:
                None takes ``poprun-emu``'s (and ``poprun-emu-scaling``'s) from the environment read
                for the layout, "" with a given layout.

        The other arguments are the attributes of the same names.

        Raises:
            ValueError: a field PopTorch would refuse, or a replication factor or instance
                index that does not fit the layout; the message names the field and a fix.
        """
        fields = {
            "gradient_accumulation": gradient_accumulation,
            "device_iterations": device_iterations,
            "output_mode": output_mode,
            "reduction": reduction,
            "replicated_tensor_sharding": replicated_tensor_sharding,
            "sharding_domain": sharding_domain,
            "offload_optimiser": offload_optimiser,
            "prefetch_depth": prefetch_depth,
            "execution_strategy": execution_strategy,
            "recomputation": recomputation,
            "available_memory_proportion": available_memory_proportion,
            "partials_type": partials_type,
        }
        resolved_layout, instance, local, view = _resolve_layout(
            layout, instance_index, replication_factor
        )
        given = {
            "job_dir": job_dir,
            "system": system,
            "report_dir": report_dir,
            "command": command,
            "scaling_request": scaling_request,
            "calibration_family": calibration_family,
            "calibration_file": calibration_file,
        }
        fields |= {
            "replication_factor": local,
            "layout": resolved_layout,
            "instance_index": instance,
            "offline": view.offline if offline is None else bool(offline),
        }
        fields |= {k: getattr(view, k) if v is None else v for k, v in given.items()}
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        self._check()

    def _check(self) -> None:
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
        names = ("job_dir", "system", "report_dir", "command", "scaling_request")
        for name in (*names, "calibration_family", "calibration_file"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(
                    f"Options: `{name}` must be a str (poprun-emu's, or an empty string), got "
                    f"{getattr(self, name)!r}."
                )
        if self.calibration_family:  # one line naming the value and the valid names
            family = check_family(self.calibration_family)
            object.__setattr__(self, "calibration_family", family)
        if self.prefetch_depth < 1:
            raise ValueError(
                f"Options: `prefetch_depth` must be >= 1 (1 = only the next batch is "
                f"prepared ahead), got {self.prefetch_depth}."
            )

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
