"""PopTorch's Python API on the emulator: ``import poptorch`` where no Poplar SDK is installed.

A PopTorch program builds ``poptorch.Options``, wraps its ``torch.nn.Module`` with
``poptorch.trainingModel``/``inferenceModel`` and feeds it from ``poptorch.DataLoader``. This
sub-package gives those names; ``launch/_fallback/poptorch`` re-exports them as the top-level
``poptorch`` module, found by the meta-path finder asked last, so a real ``poptorch`` always
wins. Names PopTorch has and the emulator does not are refused in one line naming the call.

``Options`` is ``popdist.poptorch.Options`` itself: one mapping of PopTorch's option methods
onto :class:`popdist_emu.Options` (outside ``poprun-emu`` it describes one instance with one
replica, as PopTorch's own ``Options()`` does).

References:
    PopTorch User Guide, "Reference" (``poptorch.Options``, ``poptorch.OutputMode``,
    ``poptorch.identity_loss``, ``poptorch.TensorLocationSettings``); PopRun/PopDist User
    Guide, "Python API" (``popdist.poptorch.Options``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from popdist_emu.popdist import PopTorchOptions as Options
from popdist_emu.popdist import TensorLocationSettings
from popdist_emu.poptorch import enums
from popdist_emu.poptorch._api import (
    DataLoaderMode,
    ExecutionStrategy,
    MatMulSerializationMode,
    MeanReductionStrategy,
    OutputMode,
    OverlapMode,
    ReductionType,
    SharingStrategy,
    identity_loss,
    refused,
)
from popdist_emu.poptorch._blocks import (
    AutoStage,
    BeginBlock,
    Block,
    PipelinedExecution,
    ShardedExecution,
    Stage,
    removeBlocks,
    set_available_memory,
)
from popdist_emu.poptorch._custom_ops import custom_op, register_custom_op
from popdist_emu.poptorch._identity import ConnectionType, ipu_print_tensor, nop
from popdist_emu.poptorch._names import (
    AsynchronousDataAccessor,
    Attribute,
    MultiConv,
    for_loop,
    serializedMatMul,
    set_overlap_for_input,
    set_overlap_for_output,
    setLogLevel,
)
from popdist_emu.poptorch._names import register_torch_ops as _register_torch_ops
from popdist_emu.poptorch._recompute import recomputationCheckpoint

if TYPE_CHECKING:
    from popdist_emu.poptorch import optim as optim
    from popdist_emu.poptorch._data import DataLoader as DataLoader
    from popdist_emu.poptorch._model import PoplarExecutor as PoplarExecutor
    from popdist_emu.poptorch._model import inferenceModel as inferenceModel
    from popdist_emu.poptorch._model import trainingModel as trainingModel

__all__ = [
    "AsynchronousDataAccessor",
    "Attribute",
    "AutoStage",
    "BeginBlock",
    "Block",
    "ConnectionType",
    "DataLoader",
    "DataLoaderMode",
    "ExecutionStrategy",
    "MatMulSerializationMode",
    "MeanReductionStrategy",
    "MultiConv",
    "Options",
    "OutputMode",
    "OverlapMode",
    "PipelinedExecution",
    "ReductionType",
    "ShardedExecution",
    "SharingStrategy",
    "Stage",
    "TensorLocationSettings",
    "custom_op",
    "enums",
    "for_loop",
    "identity_loss",
    "inferenceModel",
    "ipu_print_tensor",
    "nop",
    "optim",
    "recomputationCheckpoint",
    "register_custom_op",
    "removeBlocks",
    "serializedMatMul",
    "setLogLevel",
    "set_available_memory",
    "set_overlap_for_input",
    "set_overlap_for_output",
    "trainingModel",
]

_register_torch_ops()  # when the program imported torch first; else with a torch-backed name

# Torch-backed names, imported on first use: ``import poptorch`` (and popdist_emu's import
# tests) need no torch; a program that wraps a model has it.
_LAZY = {
    "DataLoader": "popdist_emu.poptorch._data",
    "PoplarExecutor": "popdist_emu.poptorch._model",
    "trainingModel": "popdist_emu.poptorch._model",
    "inferenceModel": "popdist_emu.poptorch._model",
}


def __getattr__(name: str) -> object:
    """PopTorch names the emulator does not provide: one line saying so (AttributeError)."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name == "optim":
        return _torch_backed("popdist_emu.poptorch.optim", name)
    if name in _LAZY:
        return getattr(_torch_backed(_LAZY[name], name), name)
    raise refused(name)


def _torch_backed(module: str, name: str) -> ModuleType:
    """``module``, or one line naming the install when torch or torchax is missing; with
    torch imported, PopTorch's ``torch.ops.poptorch`` operators are registered."""
    try:
        loaded = importlib.import_module(module)
        _register_torch_ops()
        return loaded
    except ModuleNotFoundError as error:
        if error.name not in ("torch", "torchax"):
            raise
        raise ModuleNotFoundError(
            f"poptorch.{name} runs the model with PyTorch on JAX and needs {error.name}, which "
            "this interpreter lacks: pip install 'popdist-emu[poptorch]'.",
            name=error.name,
        ) from None
