"""A stage of a replica: what its compiled programs ask of its IPU, in counts and bytes.

Counts are XLA's (FLOPs, bytes, transcendentals, operations, matmuls and convolutions) and
bytes are the stage's tensors; nothing here depends on the system the stage runs on, so the
hardware model prices one stage on any IPU (``hardware._replica.stage_costs``).
"""

from __future__ import annotations

from typing import NamedTuple

from hardware._planner import ConvOp


class PassCounts(NamedTuple):
    """What XLA says of one compiled pass (a stage's forward, or its backward).

    Attributes:
        flops: floating-point operations.
        bytes_accessed: bytes read and written.
        transcendentals: transcendental evaluations.
        num_ops: primitive operations (its compute sets).
        matmuls: its matmuls and convolutions, for the convolution planner.
        code_ops: operations that hold vertex code, as the program's framework records
            them (a traced PyTorch operation once, however many primitives its lowering
            took); None means ``num_ops``.
    """

    flops: float = 0.0
    bytes_accessed: float = 0.0
    transcendentals: float = 0.0
    num_ops: int = 0
    matmuls: tuple[ConvOp, ...] = ()
    code_ops: int | None = None

    @property
    def code(self) -> int:
        """Operations that hold code: ``code_ops``, or ``num_ops`` where it is not known."""
        return self.num_ops if self.code_ops is None else self.code_ops


class StageProfile(NamedTuple):
    """What one stage of a replica asks of its IPU, per micro-batch and per step.

    Attributes:
        ipu: the IPU of the replica it runs on (0-based).
        blocks: names of the blocks it holds, in order.
        forward: its forward pass; zero for a data-parallel replica, whose one program
            (the micro-step) is its ``backward``.
        backward: its backward pass.
        backward_reruns_forward: the compiled backward program runs the forward again (a
            JAX vjp does): without recomputation the stash holds the forward's activations,
            so the forward's counts are taken off the backward's.
        output_bytes: activations it sends to the next stage per micro-batch (the gradient
            of the same size comes back); 0 for the last stage.
        input_bytes: its input per micro-batch (the recomputation stash entry).
        activation_bytes: what its forward pass saves for its backward pass, per
            micro-batch (one stash entry without recomputation).
        parameter_bytes: its weights; a weight that an earlier stage on the same IPU holds
            (tied embeddings and decoder) is counted with that stage only.
        optimiser_state_bytes: its optimiser state (unsharded).
        gradient_bytes: its gradient as the runtime accumulates it (and its accumulator).
        temporary_bytes: its peak working space.
        checkpoint_bytes: bytes live while one micro-batch's backward recomputes the stage
            with a recomputation checkpoint at every block boundary; 0 means the whole
            stage's ``activation_bytes``.
        stashed_checkpoint_bytes: values the program names as recomputation checkpoints
            inside the stage (PopTorch's ``recomputationCheckpoint``), per micro-batch:
            under recomputation PopART stashes them beside the stage's input and recomputes
            one segment between them at a time (``checkpoint_bytes`` is then the largest
            segment's working set).
        block_gradient_bytes: the largest block's gradient: with gradient accumulation the
            backward pass adds each block's weight gradients into the accumulators as they
            are produced, so one block's gradients are live at a time; 0 means the whole
            stage's ``gradient_bytes``.
    """

    ipu: int
    blocks: tuple[str, ...] = ()
    forward: PassCounts = PassCounts()
    backward: PassCounts = PassCounts()
    backward_reruns_forward: bool = False
    output_bytes: int = 0
    input_bytes: int = 0
    activation_bytes: int = 0
    parameter_bytes: int = 0
    optimiser_state_bytes: int = 0
    gradient_bytes: int = 0
    temporary_bytes: int = 0
    checkpoint_bytes: int = 0
    block_gradient_bytes: int = 0
    stashed_checkpoint_bytes: int = 0

    @property
    def num_ops(self) -> int:
        """Primitive operations of its programs (their compute sets)."""
        return self.forward.num_ops + self.backward.num_ops

    @property
    def code_ops(self) -> int:
        """Operations of its programs that hold vertex code (:attr:`PassCounts.code`)."""
        return self.forward.code + self.backward.code

    @property
    def matmuls(self) -> tuple[ConvOp, ...]:
        """The matmuls and convolutions its programs run on its IPU (a backward that
        reruns the forward already holds the forward's)."""
        if self.backward_reruns_forward:
            return self.backward.matmuls
        return self.forward.matmuls + self.backward.matmuls
