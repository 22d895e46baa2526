"""``poptorch.enums`` where no Poplar SDK provides it: the emulator's."""

from popdist_emu.poptorch.enums import (
    AutoStage,
    DataLoaderMode,
    MatMulSerializationMode,
    MeanReductionStrategy,
    OutputMode,
    OverlapMode,
    ReductionType,
    SharingStrategy,
)

__all__ = [
    "AutoStage",
    "DataLoaderMode",
    "MatMulSerializationMode",
    "MeanReductionStrategy",
    "OutputMode",
    "OverlapMode",
    "ReductionType",
    "SharingStrategy",
]
