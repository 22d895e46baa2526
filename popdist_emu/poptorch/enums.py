"""``poptorch.enums``: PopTorch's enumerations as a module of their own.

Graphcore's BERT and GPT-2 write ``from poptorch.enums import DataLoaderMode`` at import;
the members are those of ``poptorch.DataLoaderMode`` etc. (the same objects).

References:
    PopTorch User Guide, "Reference" (``poptorch.enums``: ``DataLoaderMode``, ``OutputMode``,
    ``ReductionType``, ``MatMulSerializationMode``, ``AutoStage``, ``ConnectionType``,
    ``MeanReductionStrategy``, ``OverlapMode``, ``SharingStrategy``); graphcore/examples,
    ``nlp/bert/pytorch/pretraining_data.py`` and ``nlp/gpt2/pytorch/train_gpt2.py``.
"""

from popdist_emu.poptorch._api import (
    DataLoaderMode,
    MatMulSerializationMode,
    MeanReductionStrategy,
    OutputMode,
    OverlapMode,
    ReductionType,
    SharingStrategy,
)
from popdist_emu.poptorch._blocks import AutoStage
from popdist_emu.poptorch._identity import ConnectionType

__all__ = [
    "AutoStage",
    "ConnectionType",
    "DataLoaderMode",
    "MatMulSerializationMode",
    "MeanReductionStrategy",
    "OutputMode",
    "OverlapMode",
    "ReductionType",
    "SharingStrategy",
]
