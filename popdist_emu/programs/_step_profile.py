"""ONE place that builds a ``hardware.StepProfile``: program counts joined with run settings.

A profile has two sources. What the compiled programs say (:class:`ProgramCounts`: XLA's
cost of one micro-batch's forward and backward and of one update, the operation count, the
saved activations and the largest temporary) and what the run decides
(:class:`StepSettings`: micro-batch, accumulation, device iterations, the collectives the
reduce-and-update stage records, RTS and offloading, the planner's settings), plus the byte
sizes of the step's shapes. :func:`build_step_profile` joins them, and every path goes
through it: the data-parallel step (``Trainer.profile``), ``profile_programs``,
``profile_step``, and the pipelined replica (``popdist_emu.sim``, its stages' counts summed,
and its out-of-memory bound before anything is compiled).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

from hardware import CollectiveRecord, ConvOp, RunSettings, StepProfile
from popdist_emu._options import Options
from popdist_emu._trees import tree_nbytes
from popdist_emu.programs._analysis import XlaCost, precision_of
from popdist_emu.programs._shapes import gradient_nbytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepSettings(RunSettings):
    """What a step's profile takes from the run rather than from its programs: the hardware
    model's :class:`hardware.RunSettings` (micro-batch, accumulation, device iterations,
    collectives, RTS and offloading, recomputation, name, availableMemoryProportion), the
    micro-batch required, and what the runtime decides besides.

    Attributes:
        partials_type: PopLibs' ``partialsType`` of the matmuls and convolutions.
        output_mode: ``"all"``: one loss per device iteration goes back to the host;
            ``"final"``: the last.
    """

    # Required here (a keyword-only field may follow defaults); a bare annotation would
    # inherit RunSettings' default.
    micro_batch_size: int = dataclasses.field()
    partials_type: str = "float"
    output_mode: str = "final"

    @classmethod
    def from_options(
        cls,
        options: Options,
        *,
        micro_batch_size: int,
        collectives: Sequence[CollectiveRecord],
        sharding_domain: int,
        recomputation: bool,
        name: str,
    ) -> StepSettings:
        """The settings of a trainer's step: its Options, with what the trainer resolved
        (the micro-batch, the stage's collectives, the RTS domain, recomputation)."""
        return cls(
            micro_batch_size=int(micro_batch_size),
            gradient_accumulation=int(options.gradient_accumulation),
            device_iterations=int(options.device_iterations),
            collectives=tuple(collectives),
            replicated_tensor_sharding=bool(options.replicated_tensor_sharding),
            offload_optimiser_state=bool(options.offload_optimiser),
            sharding_domain=int(sharding_domain),
            recomputation=bool(recomputation),
            name=name,
            available_memory_proportion=options.available_memory_proportion,
            partials_type=options.partials_type,
            output_mode=options.output_mode,
        )


_LOSS_BYTES = 4


class ProgramCounts(NamedTuple):
    """What the compiled programs of one replica's step say about its cost.

    Attributes:
        grad: XLA's cost of one micro-batch's forward and backward pass.
        update: XLA's cost of one weight update (zero when the update is not part of it).
        num_ops: primitive operations of the step (its compute sets).
        activation_bytes: bytes the forward pass saves for the backward pass.
        temporary_bytes: peak working space of one operation beyond the activations.
        matmuls: the step's matmuls and convolutions, for the planner model.
        code_ops: operations that hold vertex code (``JaxprSize.code_ops``); None means
            ``num_ops``.
    """

    grad: XlaCost = XlaCost()
    update: XlaCost = XlaCost()
    num_ops: int = 0
    activation_bytes: int = 0
    temporary_bytes: int = 0
    matmuls: tuple[ConvOp, ...] = ()
    code_ops: int | None = None


def build_step_profile(
    counts: ProgramCounts,
    settings: StepSettings,
    *,
    params: Any = None,
    opt_state: Any = None,
    micro_batch: Any = None,
    gradient_bytes: int | None = None,
) -> StepProfile:
    """The ``hardware.StepProfile`` of one replica's step: the one place that makes one.

    Args:
        counts: what the compiled programs say.
        settings: what the run decides.
        params: the weights (arrays or shapes): their bytes and precision; None for a
            bound made before anything is measured.
        opt_state: the whole optimiser state (arrays or shapes), if any.
        micro_batch: one micro-batch of one replica: the bytes the host streams per
            micro-batch; None for none.
        gradient_bytes: one replica's gradient bytes; default those of ``params``'
            gradient (``gradient_nbytes``, the one definition).
    """
    parameter_bytes = tree_nbytes(params)
    return StepProfile(
        grad_flops=counts.grad.flops,
        grad_bytes_accessed=counts.grad.bytes_accessed,
        grad_transcendentals=counts.grad.transcendentals,
        update_flops=counts.update.flops,
        update_bytes_accessed=counts.update.bytes_accessed,
        parameter_bytes=parameter_bytes,
        optimiser_state_bytes=tree_nbytes(opt_state),
        gradient_bytes=gradient_nbytes(params) if gradient_bytes is None else int(gradient_bytes),
        activation_bytes=int(counts.activation_bytes),
        temporary_bytes=int(counts.temporary_bytes),
        host_bytes_per_micro_batch=tree_nbytes(micro_batch),
        num_ops=int(counts.num_ops),
        code_ops=None if counts.code_ops is None else int(counts.code_ops),
        precision=precision_of(params),
        matmuls=counts.matmuls,
        **settings.run_settings(),
        # The Trainer returns each replica's float32 loss of a device iteration.
        host_output_bytes_per_micro_batch=_LOSS_BYTES,
        outputs_per_step=int(settings.device_iterations) if settings.output_mode == "all" else 1,
    )
