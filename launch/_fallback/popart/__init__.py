"""``popart`` where no Poplar SDK provides it: the enums Graphcore's PopTorch applications read.

Graphcore's BERT, GPT-2, CNNs and ViT (graphcore/examples, ``nlp/bert/pytorch/ipu_options.py``,
``nlp/gpt2/pytorch/ipu_options.py``, ``vision/cnns/pytorch/utils/ipu_settings.py``,
``vision/vit/pytorch/ipu_options.py``) ``import popart`` only to pass PopART enum values to
PopTorch as integers: ``opts._Popart.set("subgraphCopyingStrategy",
int(popart.SubgraphCopyingStrategy.JustInTime))``,
``opts.enableSyntheticData(int(popart.SyntheticDataMode.RandomNormal))``. These are those
enums, with PopART's member names (as its Python module spells them: ``NoRecompute`` is C++'s
``RecomputationType::None``) and values, as ``IntEnum`` so that ``int(...)`` gives what
PopART's would. Found by the meta-path finder asked last (``launch/_popdist_finder``), so an
installed PopART always wins. Any other name is refused in one line (``AttributeError``):
PopART's builder, sessions and IR are a compiler the emulator does not have.

References:
    PopART C++ API Reference, ``SessionOptions`` (``SyntheticDataMode``,
    ``AccumulateOuterFragmentSchedule``, ``SubgraphCopyingStrategy``, ``RecomputationType``),
    https://docs.graphcore.ai/projects/popart-cpp-api/en/latest/; graphcore/popart 3.4
    ``willow/include/popart/sessionoptions.hpp`` (the values) and
    ``python/popart/popart_core/popart.cpp`` (the Python names).
"""

import enum as _enum

from launch._fallback_refusal import refusing

__all__ = [
    "AccumulateOuterFragmentSchedule",
    "RecomputationType",
    "SubgraphCopyingStrategy",
    "SyntheticDataMode",
]


class SyntheticDataMode(_enum.IntEnum):
    """Where input tensors come from (``SessionOptions::syntheticDataMode``)."""

    Off = 0  # the host's data
    Zeros = 1
    RandomNormal = 2  # ~N(0, 1), made on the device
    RandomUniform = 3


class AccumulateOuterFragmentSchedule(_enum.IntEnum):
    """How the operations after the gradient-accumulation loop are scheduled."""

    Scheduler = 0
    Serial = 1
    OverlapCycleOptimized = 2
    OverlapMemoryOptimized = 3


class SubgraphCopyingStrategy(_enum.IntEnum):
    """When a subgraph's inputs and outputs are copied."""

    OnEnterAndExit = 0
    JustInTime = 1


class RecomputationType(_enum.IntEnum):
    """Which activations the backward pass recomputes (``autoRecomputation``)."""

    NoRecompute = 0
    Standard = 1
    NormOnly = 2
    Pipeline = 3
    RecomputeAll = 4


__getattr__, __dir__ = refusing(
    "popart",
    __all__,
    "which has only the enums Graphcore's PopTorch applications read ({names}): PopART's "
    "builder and sessions need a Poplar SDK; remove the use or install the SDK.",
)
