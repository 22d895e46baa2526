"""What one training step asks of the hardware: the input of every cost and memory model.

A StepProfile is pure data, filled by the runtime (``popdist_emu.profile_step`` and the
Trainer) from XLA's cost and memory analysis of the compiled per-replica step, so the
hardware model never needs JAX.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from hardware._planner import DEFAULT_AVAILABLE_MEMORY_PROPORTION, proportion_for_ipu

CollectiveKind = Literal["all_reduce", "reduce_scatter", "all_gather", "broadcast"]
COLLECTIVE_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
# The ring methods GCL runs. ``auto`` is a request, not a method: gcl settles it by its own
# rule (``gcl.collective_method``) when a record is made, so the model prices what runs.
METHODS = (
    "clockwise_ring",
    "anticlockwise_ring",
    "bidirectional_ring_pair",
    "meet_in_middle_ring",
)


class CollectiveRecord(NamedTuple):
    """One collective of a step, as GCL runs it.

    Attributes:
        kind: ``all_reduce``, ``reduce_scatter``, ``all_gather`` or ``broadcast``.
        method: the GCL method that runs (see ``METHODS``), never ``auto``: the record is
            made with the method gcl's rule settles ``auto`` to (``gcl.collective_method``).
        group: ``"all"``, ``"consecutive(k)"`` or ``"orthogonal(k)"`` (also accepts
            ``str(gcl.Consecutive(k))`` and the like: the kind and the first integer count).
        bytes: bytes of the full (unsharded) tensor per replica; for ``all_gather`` the
            size of the gathered result.
    """

    kind: str
    method: str
    group: str
    bytes: int


class ReplicaGroup(NamedTuple):
    """A GCL replica group resolved against a replica count.

    Attributes:
        size: replicas per group.
        stride: distance between consecutive members' replica indices.
    """

    size: int
    stride: int


def resolve_group(group: object, num_replicas: int) -> ReplicaGroup:
    """The size and stride of ``group`` among ``num_replicas`` replicas.

    ``Consecutive(k)`` groups k neighbouring replicas; ``Orthogonal(k)`` groups k replicas
    spaced ``num_replicas / k`` apart, orthogonal to ``Consecutive(num_replicas / k)``, as
    PopART's ``CommGroup(type, replicaGroupSize)`` does.

    Raises:
        ValueError: for an unknown group or a size that does not divide the replicas.
    """
    text = str(group if group is not None else "all").lower()
    match = re.match(r"\s*(all|consecutive|orthogonal)\D*(\d*)", text)
    if match is None:
        raise ValueError(
            f"`group` {group!r} is not a GCL group: use 'all', 'consecutive(k)' or 'orthogonal(k)'."
        )
    kind, digits = match.group(1), match.group(2)
    if kind == "all" or not digits:
        return ReplicaGroup(num_replicas, 1)
    size = int(digits)
    if size < 1 or num_replicas % size:
        raise ValueError(
            f"`group` {group!r} has size {size}, which does not divide the {num_replicas} "
            "replicas: use a group size that divides --num-replicas."
        )
    if kind == "consecutive":
        return ReplicaGroup(size, 1)
    return ReplicaGroup(size, num_replicas // size)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What a step's cost takes from the run rather than from its programs: the batch and
    its repetitions, the collectives of an update, where the optimiser state lives, and the
    planner's memory budget. The runtime's own settings value (``popdist_emu.StepSettings``)
    extends it, so each setting is defined once.

    Attributes:
        micro_batch_size: samples per micro-batch per replica.
        gradient_accumulation: micro-batches per weight update.
        device_iterations: weight updates per step (per host synchronisation).
        collectives: the collectives of one weight update.
        replicated_tensor_sharding: optimiser state sharded over ``sharding_domain`` replicas.
        offload_optimiser_state: optimiser state kept in Streaming Memory.
        sharding_domain: replicas the optimiser state is sharded over (0 = all replicas).
        recomputation: activations recomputed in the backward pass (already reflected in
            ``activation_bytes``; kept for the out-of-memory remedies).
        name: the model's name, for reports.
        available_memory_proportion: PopLibs' ``availableMemoryProportion`` of the IPUs, a
            float or PopTorch's per-IPU mapping ``{"IPU0": 0.6, ...}`` (default 0.6).
    """

    micro_batch_size: int = 1
    gradient_accumulation: int = 1
    device_iterations: int = 1
    collectives: tuple[CollectiveRecord, ...] = ()
    replicated_tensor_sharding: bool = False
    offload_optimiser_state: bool = False
    sharding_domain: int = 0
    recomputation: bool = False
    name: str = "model"
    available_memory_proportion: float | Mapping[str, float] = DEFAULT_AVAILABLE_MEMORY_PROPORTION

    def __post_init__(self) -> None:
        for field in ("micro_batch_size", "gradient_accumulation", "device_iterations"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"`{field}` must be a positive integer, got {value!r}.")
        records = tuple(CollectiveRecord(*r) for r in self.collectives)
        for record in records:
            if record.kind not in COLLECTIVE_KINDS:
                raise ValueError(
                    f"collective kind {record.kind!r} is unknown: use one of {COLLECTIVE_KINDS}."
                )
            if record.method == "auto":
                raise ValueError(
                    f"the {record.kind} record holds method 'auto', which gcl settles before it "
                    "runs: record the method it runs, gcl.collective_method(kind, "
                    "bytes_per_replica, group_size)."
                )
            if record.method not in METHODS:
                raise ValueError(
                    f"collective method {record.method!r} is unknown: use one of {METHODS}."
                )
        object.__setattr__(self, "collectives", records)
        proportion_for_ipu(self.available_memory_proportion)  # one-line error when bad

    def run_settings(self) -> dict[str, Any]:
        """The run's settings alone, by name (to build a profile from a settings value)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(RunSettings)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepProfile(RunSettings):
    """The per-replica cost of one training step, independent of the system it runs on:
    what its programs measure, with the run's settings (:class:`RunSettings`).

    Attributes:
        grad_flops: FLOPs of one micro-batch's forward and backward pass (XLA's count).
        grad_bytes_accessed: bytes read and written by that pass (XLA's count).
        grad_transcendentals: transcendental evaluations of that pass.
        update_flops: FLOPs of one weight update (optimiser step) on the full weights.
        update_bytes_accessed: bytes read and written by that update.
        parameter_bytes: bytes of the weights of one replica.
        optimiser_state_bytes: bytes of the optimiser state of one replica (unsharded).
        gradient_bytes: bytes of one gradient (and of the accumulator when GA > 1).
        activation_bytes: bytes saved by the forward pass for the backward pass.
        temporary_bytes: peak working space of one operation beyond the saved activations.
        host_bytes_per_micro_batch: bytes a replica receives from the host per micro-batch
            (inputs and labels).
        num_ops: primitive operations in the step (its compute sets).
        precision: "float16" or "float32": the arithmetic the model runs in.
        matmuls: the step's matmuls and convolutions (``hardware._planner.ConvOp``), planned
            by the convolution planner model; empty leaves the planner out.
        host_cpu_seconds_per_sample: CPU seconds the host spends preparing one sample (the
            data loader's work), measured on the machine that ran the program; 0 = not
            measured (the host's work is then left out).
        host_cpu_relative_spread: the spread of that measurement across the batches timed
            (``hardware._host_band.relative_spread``: one standard deviation, as a fraction);
            0 = not known. A band the host decides carries it (``hardware._host_band``).
        host_workers: processes or threads preparing samples in parallel (a data loader's
            workers; 0 = the main thread, between calls).
        host_prefetch: whether the host prepares the next steps' data while the IPUs run
            (an asynchronous loader or an infeed thread); False: between calls.
        host_output_bytes_per_micro_batch: bytes a replica copies back to the host for one
            micro-batch whose outputs are returned (its losses and model outputs).
        outputs_per_step: micro-batches per step whose outputs go back to the host, evenly
            spaced, each copied as soon as it is computed: PopTorch's ``OutputMode.All``
            returns every micro-batch (gradient accumulation x device iterations),
            ``Final`` only the last; the runtime's Trainer returns one loss per device
            iteration (``output_mode="all"``) or the last.
        code_ops: operations of the step that hold vertex code, as its framework records
            them (a traced PyTorch operation once, however many primitives its lowering
            took); None means ``num_ops``.
    """

    grad_flops: float
    grad_bytes_accessed: float
    grad_transcendentals: float = 0.0
    update_flops: float = 0.0
    update_bytes_accessed: float = 0.0
    parameter_bytes: int = 0
    optimiser_state_bytes: int = 0
    gradient_bytes: int = 0
    activation_bytes: int = 0
    temporary_bytes: int = 0
    host_bytes_per_micro_batch: int = 0
    num_ops: int = 0
    precision: str = "float32"
    matmuls: tuple = ()
    host_cpu_seconds_per_sample: float = 0.0
    host_cpu_relative_spread: float = 0.0
    host_workers: int = 1
    host_prefetch: bool = True
    host_output_bytes_per_micro_batch: int = 0
    outputs_per_step: int = 1
    code_ops: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.precision not in ("float16", "bfloat16", "float32"):
            raise ValueError(f"`precision` must be 'float16' or 'float32', got {self.precision!r}.")
        object.__setattr__(self, "matmuls", tuple(self.matmuls))
        host = self.host_cpu_seconds_per_sample
        if not host >= 0:
            raise ValueError(f"`host_cpu_seconds_per_sample` must be >= 0, got {host}.")
        spread = self.host_cpu_relative_spread
        if not spread >= 0:
            raise ValueError(f"`host_cpu_relative_spread` must be >= 0, got {spread}.")
        n_micro = self.gradient_accumulation * self.device_iterations
        outputs = self.outputs_per_step
        if not isinstance(outputs, int) or outputs < 1 or n_micro % outputs:
            raise ValueError(
                f"`outputs_per_step` must be a positive divisor of the {n_micro} micro-batches "
                f"of a step, got {outputs!r}."
            )
        if not isinstance(self.host_workers, int) or self.host_workers < 0:
            raise ValueError(f"`host_workers` must be an integer >= 0, got {self.host_workers!r}.")

    @property
    def samples_per_update(self) -> int:
        """Samples one replica processes per weight update."""
        return self.micro_batch_size * self.gradient_accumulation

    def replace(self, **changes: object) -> StepProfile:
        """A copy with ``changes`` applied (for what-if studies)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
