"""PopTorch's enumerations, ``identity_loss`` and the one-line refusal of unsupported calls.

References:
    PopTorch User Guide, "Reference": ``poptorch.OutputMode`` (All, Final, EveryN, Sum),
    ``poptorch.ReductionType`` (Sum, Mean, NoReduction), ``poptorch.DataLoaderMode`` (Sync,
    Async, AsyncRebatched), ``poptorch.MatMulSerializationMode`` (InputChannels, ReducingDim,
    OutputChannels, Disabled), ``poptorch.MeanReductionStrategy`` (Running, Post,
    PostAndLoss), ``poptorch.SharingStrategy`` (SharedMemory, FileSystem, Fork, ForkServer),
    ``poptorch.OverlapMode`` (NoOverlap, OverlapAccumulationLoop,
    OverlapDeviceIterationLoop), ``poptorch.identity_loss(x, reduction)`` ("sum", "mean", "none":
    marks ``x`` as the loss to minimise).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class OutputMode(enum.IntEnum):
    """Which device iterations' outputs go back to the host (PopTorch's ``OutputMode``)."""

    Final = 0
    All = 1
    Sum = 2
    EveryN = 3
    Default = 4


class ReductionType(enum.IntEnum):
    """How gradients of accumulated micro-batches and replicas are combined."""

    Sum = 0
    Mean = 1
    NoReduction = 2


class DataLoaderMode(enum.IntEnum):
    """How ``poptorch.DataLoader`` loads: the emulator loads every mode synchronously."""

    Sync = 0
    Async = 1
    AsyncRebatched = 2


class MatMulSerializationMode(enum.Enum):
    """Which dimension ``poptorch.serializedMatMul`` splits: for ``(m, n) @ (n, p)``, m
    (InputChannels), n (ReducingDim), p (OutputChannels), or none (Disabled)."""

    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class MeanReductionStrategy(enum.IntEnum):
    """How a mean over accumulated micro-batches is taken: a running mean, or a sum divided
    at the end (``Post``, ``PostAndLoss``). The same mean, so the emulator computes one."""

    Running = 0
    Post = 1
    PostAndLoss = 2


class SharingStrategy(enum.IntEnum):
    """How asynchronous data-loader workers share tensors with the main process."""

    SharedMemory = 0
    FileSystem = 1
    Fork = 2
    ForkServer = 3


class OverlapMode(enum.Enum):
    """Whether a tensor's host transfer overlaps the compute (``set_overlap_for_input``)."""

    NoOverlap = "no_overlap"
    OverlapAccumulationLoop = "overlap_accumulation_loop"
    OverlapDeviceIterationLoop = "overlap_device_iteration_loop"


class ExecutionStrategy(enum.Enum):
    """Marker base of PopTorch's execution strategies (pipelined, sharded)."""


class UnsupportedError(AttributeError):
    """A PopTorch name the emulator does not provide (its message is the whole story)."""


def refused(name: str) -> UnsupportedError:
    """The one-line error for ``poptorch.<name>``, which the emulator does not provide.

    Args:
        name: the attribute of ``poptorch`` the program asked for.

    Returns:
        The error to raise; its message names the call and what to do instead.
    """
    return UnsupportedError(
        f"poptorch.{name} is not supported by popdist-emu (no IPU code generation or "
        f"Poplar-specific feature behind it); remove the call, or run on a Poplar SDK."
    )


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """``poptorch.identity_loss(x, reduction)``: ``x`` reduced into the loss to minimise.

    Args:
        x: a torch tensor (or anything with ``sum``/``mean``).
        reduction: ``"sum"``, ``"mean"`` or ``"none"`` (``x`` must then already be the loss).

    Returns:
        The reduced tensor.

    Raises:
        ValueError: another reduction.
    """
    from popdist_emu.poptorch._loss_output import mark  # torch only when a loss is marked

    if reduction == "sum":
        return mark(x.sum())
    if reduction == "mean":
        return mark(x.mean())
    if reduction == "none":
        return mark(x)
    raise ValueError(
        f"poptorch.identity_loss(reduction={reduction!r}): PopTorch takes 'sum', 'mean' or 'none'."
    )
