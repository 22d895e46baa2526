"""PopTorch's option groups (``opts.Training``, ``opts.Distributed``, ...) and
``TensorLocationSettings``, for ``popdist.poptorch.Options`` (``_poptorch_options``).

A group's setters write the owner's fields; the attributes PopTorch's groups expose are
readable as PopTorch's are (``opts.Training.gradient_accumulation``,
``opts.Distributed.processId``: Graphcore's CNNs and ViT read them to size their data);
other methods go to the owner's tables (no effect, or refused in one line).

References:
    PopTorch User Guide, "Options" (``_TrainingOptions``: ``gradientAccumulation``,
    ``accumulationAndReplicationReductionType``,
    ``setMeanAccumulationAndReplicationReductionStrategy``; ``_DistributedOptions``:
    ``configureProcessId``, ``processId``, ``numProcesses``; ``TensorLocationSettings``);
    PopTorch's ``python/options.py`` (github.com/graphcore/poptorch: the attribute names
    ``gradient_accumulation``, ``accumulation_and_replication_reduction_type``,
    ``distributed_process_id``, ``num_distributed_processes``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from popdist_emu.popdist._poptorch_checks import count

if TYPE_CHECKING:
    from popdist_emu.popdist._poptorch_options import Options

# PopTorch's ReductionType values (an IntEnum there: Sum = 0, Mean = 1), so a read compares
# equal to poptorch.ReductionType's members.
_REDUCTION_VALUES = {"sum": 0, "mean": 1}
_NOTED: set[str] = set()  # notes given once
_WARNED: set[str] = set()  # option methods named once as having no effect


def no_effect(spelled: str, method: str, detail: str = "") -> None:
    """Names ``method`` of ``spelled`` (the program's options class) once per process as
    accepted with no effect; ``detail`` says what of it is read, if anything."""
    if method not in _WARNED:
        _WARNED.add(method)
        warnings.warn(
            f"{spelled}.{method}: accepted, no effect in the emulator (it changes neither "
            f"its numbers nor its simulated time){detail}",
            stacklevel=3,
        )


def _name(value: object) -> str:
    """The enumeration member's name, lower case: ``OutputMode.All`` -> ``"all"``."""
    return str(getattr(value, "name", value)).rsplit(".", 1)[-1].lower()


class _Placement(Protocol):
    """What the setters read of a TensorLocationSettings (ours, or any with these)."""

    @property
    def on_chip(self) -> bool: ...

    @property
    def replicated_tensor_sharding(self) -> bool: ...


class TensorLocationSettings:
    """PopTorch's ``TensorLocationSettings``: where a kind of tensor lives.

    ``useOnChipStorage(False)`` streams the tensors from host memory (the emulator's
    optimiser-state offloading); ``useReplicatedTensorSharding(True)`` shards them over the
    replicas (RTS). The ``minElements...`` thresholds are kept.
    """

    def __init__(self) -> None:
        self.on_chip = True
        self.replicated_tensor_sharding = False
        self.min_elements_for_off_chip = 0
        self.min_elements_for_rts = 0
        self.io_tiles_to_load = False

    def _set(self, **values: object) -> TensorLocationSettings:
        """PopTorch's setters: set, then return the settings for the next call."""
        vars(self).update(values)
        return self

    def useOnChipStorage(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        return self._set(on_chip=bool(use))

    def useReplicatedTensorSharding(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        return self._set(replicated_tensor_sharding=bool(use))

    def minElementsForOffChip(self, n: int) -> TensorLocationSettings:  # noqa: N802
        call = "poptorch.TensorLocationSettings.minElementsForOffChip"
        return self._set(min_elements_for_off_chip=count(call, n, minimum=0))

    def minElementsForReplicatedTensorSharding(self, n: int) -> TensorLocationSettings:  # noqa: N802
        call = "poptorch.TensorLocationSettings.minElementsForReplicatedTensorSharding"
        return self._set(min_elements_for_rts=count(call, n, minimum=0))

    def useIOTilesToLoad(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        return self._set(io_tiles_to_load=bool(use))


def _read_settings(settings: _Placement, method: str) -> tuple[bool, bool]:
    """``(on_chip, rts)`` of a TensorLocationSettings (ours, or any with those attributes)."""
    try:
        return bool(settings.on_chip), bool(settings.replicated_tensor_sharding)
    except AttributeError:
        raise TypeError(
            f"TensorLocations.{method}: expected popdist.poptorch.TensorLocationSettings, got "
            f"{type(settings).__name__}; build it with TensorLocationSettings()"
            f".useOnChipStorage(...)."
        ) from None


class _Group:
    """One of PopTorch's option groups (``opts.Training``, ``opts.Precision``, ...)."""

    _group = ""

    def __init__(self, owner: Options) -> None:
        self._owner = owner

    def __getattr__(self, method: str) -> Callable[..., Options]:
        if method.startswith("__"):
            raise AttributeError(method)
        return self._owner._method(self._group, method)


class _Training(_Group):
    _group = "Training"

    def gradientAccumulation(self, n: int) -> Options:  # noqa: N802
        call = f"{self._owner._spelled}.Training.gradientAccumulation"
        self._owner._fields["gradient_accumulation"] = count(call, n)
        return self._owner

    def accumulationAndReplicationReductionType(self, reduction: object) -> Options:  # noqa: N802
        name = _name(reduction)
        if name not in ("mean", "sum"):
            raise ValueError(
                f"Training.accumulationAndReplicationReductionType({name!r}): the emulator "
                f"reduces gradients by 'mean' or 'sum' only; a running mean would add in another "
                f"order and give other bits."
            )
        self._owner._fields["reduction"] = name
        return self._owner

    def setMeanAccumulationAndReplicationReductionStrategy(self, strategy: object) -> Options:  # noqa: N802
        """Running, Post or PostAndLoss (``poptorch.MeanReductionStrategy``): each takes the
        same mean. The emulator sums, then divides (Post), so Running (a mean kept as it
        goes, as MAE and Swin set it) agrees within float rounding; it is named once."""
        name = _name(strategy)
        if name not in ("running", "post", "postandloss"):
            raise ValueError(
                f"Training.setMeanAccumulationAndReplicationReductionStrategy({strategy!r}): "
                "pass a poptorch.MeanReductionStrategy member (Running, Post, PostAndLoss)."
            )
        if name == "running" and "running mean" not in _NOTED:
            _NOTED.add("running mean")
            warnings.warn(
                "popdist.poptorch.Options.Training.setMeanAccumulationAndReplicationReduction"
                "Strategy(Running): the emulator takes the mean after the sum (Post), the same "
                "mean within float rounding",
                stacklevel=2,
            )
        return self._owner._set(mean_reduction_strategy=name)

    @property
    def gradient_accumulation(self) -> int:
        """What ``gradientAccumulation`` set (PopTorch's default 1)."""
        return int(self._owner._fields.get("gradient_accumulation", 1))

    @property
    def accumulation_and_replication_reduction_type(self) -> int:
        """``poptorch.ReductionType``'s value of the reduction set (default Mean)."""
        return _REDUCTION_VALUES[str(self._owner._fields.get("reduction", "mean"))]


class _Precision(_Group):
    _group = "Precision"

    def setPartialsType(self, dtype: object) -> Options:  # noqa: N802
        name = str(getattr(dtype, "name", dtype)).removeprefix("torch.")
        partials = {"half": "half", "float16": "half", "float": "float", "float32": "float"}
        if name not in partials:
            raise ValueError(
                f"Precision.setPartialsType({dtype!r}): PopTorch takes torch.half or torch.float."
            )
        if partials[name] == "half" and "setPartialsType" not in _NOTED:
            _NOTED.add("setPartialsType")
            warnings.warn(
                f"{self._owner._spelled}.Precision.setPartialsType(torch.{name}): the simulated "
                "IPU plans its matmuls and convolutions with half partials (half the temporary "
                "memory per partial); the numbers computed here keep float32 partials",
                stacklevel=2,
            )
        self._owner._fields["partials_type"] = partials[name]
        return self._owner


# PopART's ``RecomputationType`` values (``SessionOptions::autoRecomputation``): None 0,
# Standard 1, NormOnly 2, Pipeline 3, RecomputeAll 4.
RECOMPUTATION_TYPES = {0: "None", 1: "Standard", 2: "NormOnly", 3: "Pipeline", 4: "RecomputeAll"}


class _Popart(_Group):
    """``opts._Popart``: PopART's session options by name. ``autoRecomputation`` is kept
    (it decides what a pipeline stashes: ``popdist_emu.poptorch._placement``); any other
    option steers PopART's compiler and is accepted, named once."""

    _group = "_Popart"

    def set(self, key: str, value: object) -> Options:
        """``opts._Popart.set(key, value)``.

        Raises:
            ValueError: an ``autoRecomputation`` that is not a PopART ``RecomputationType``.
        """
        if key != "autoRecomputation":
            no_effect(
                self._owner._spelled,
                "_Popart.set",
                f"; only autoRecomputation is read, not {key!r}",
            )
            return self._owner
        number = int(value) if isinstance(value, int) and not isinstance(value, bool) else None
        if number not in RECOMPUTATION_TYPES:
            raise ValueError(
                f"{self._owner._spelled}._Popart.set('autoRecomputation', {value!r}): pass a "
                f"PopART RecomputationType value {RECOMPUTATION_TYPES} "
                "(e.g. int(popart.RecomputationType.Pipeline), 3)."
            )
        return self._owner._set(auto_recomputation=number)


class _TensorLocations(_Group):
    _group = "TensorLocations"

    def setOptimizerLocation(self, settings: _Placement) -> Options:  # noqa: N802
        on_chip, rts = _read_settings(settings, "setOptimizerLocation")
        self._owner._fields["offload_optimiser"] = not on_chip
        self._owner._fields["replicated_tensor_sharding"] = rts
        return self._owner

    def _only_default(self, settings: _Placement, method: str, what: str) -> Options:
        on_chip, rts = _read_settings(settings, method)
        if not on_chip or rts:
            raise ValueError(
                f"TensorLocations.{method}: the emulator keeps {what} on chip and unsharded; "
                f"streaming or sharding them would change its simulated memory and time. Set "
                f"the optimiser state's location instead (setOptimizerLocation)."
            )
        return self._owner

    def setWeightLocation(self, settings: _Placement) -> Options:  # noqa: N802
        return self._only_default(settings, "setWeightLocation", "weights")

    def setAccumulatorLocation(self, settings: _Placement) -> Options:  # noqa: N802
        return self._only_default(settings, "setAccumulatorLocation", "gradient accumulators")

    def setActivationLocation(self, settings: _Placement) -> Options:  # noqa: N802
        return self._only_default(settings, "setActivationLocation", "activations")


class _Distributed(_Group):
    """``opts.Distributed``: under PopDist, this instance is process ``getInstanceIndex()``
    of ``getNumInstances()`` (``popdist.poptorch.Options`` configures it so); the setters
    (``configureProcessId``, ``disable``) are accepted without effect, as PopRun decides."""

    _group = "Distributed"

    @property
    def processId(self) -> int:  # noqa: N802
        """This instance's index (PopTorch's ``distributed_process_id``)."""
        return int(self._owner.process_id[0])

    @property
    def numProcesses(self) -> int:  # noqa: N802
        """The number of instances (PopTorch's ``num_distributed_processes``)."""
        return int(self._owner.process_id[1])

    distributed_process_id = processId
    num_distributed_processes = numProcesses
