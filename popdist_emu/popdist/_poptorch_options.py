"""``popdist.poptorch.Options``: PopTorch's option methods, mapped onto the emulator's Options.

Real PopDist host code writes ``opts = popdist.poptorch.Options(ipus_per_replica=K)`` and then
calls PopTorch's option methods on it (``deviceIterations``, ``Training.gradientAccumulation``,
``outputMode``, ``TensorLocations.setOptimizerLocation``, ...). Each call here either

- sets the matching field of the emulator's :class:`popdist_emu.Options` (replication factor =
  local replicas, device iterations, gradient accumulation, reduction, output mode, optimiser
  state offloading and replicated tensor sharding), or keeps a value for the emulator to read
  (random seed, executable cache, available memory proportion, execution strategy, PopART's
  ``autoRecomputation`` through ``_Popart.set``);
- is accepted and named once in a warning, when it cannot change the emulator's numbers or
  its simulated time (precision, logging, profiling, compiler switches);
- or is refused with a one-line reason, when silently losing it would change them.

:meth:`Options.to_options` gives the emulator's frozen Options; ``popdist_emu.Trainer`` calls it
when handed these options. Enumerations are read by name (``poptorch.OutputMode.All``, its
``.name`` ``"All"`` or the string ``"all"`` all mean the same), since PopTorch is not installed
here.

References:
    PopRun/PopDist User Guide, "Python API" (``popdist.poptorch.Options``); PopTorch User Guide,
    "Options" (``poptorch.Options``: deviceIterations, replicationFactor, randomSeed,
    enableExecutableCaching, outputMode, Training.gradientAccumulation,
    Training.accumulationAndReplicationReductionType, TensorLocations.setOptimizerLocation,
    TensorLocationSettings.useOnChipStorage / useReplicatedTensorSharding,
    setAvailableMemoryProportion, setExecutionStrategy).
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
from collections.abc import Callable
from typing import Any

from popdist_emu._options import Options as EmulatorOptions
from popdist_emu.popdist import api as popdist
from popdist_emu.popdist._poptorch_checks import close_match, count, public_methods
from popdist_emu.popdist._poptorch_groups import (
    TensorLocationSettings as TensorLocationSettings,
)
from popdist_emu.popdist._poptorch_groups import (
    _Distributed,
    _Group,
    _name,
    _Popart,
    _Precision,
    _TensorLocations,
    _Training,
    no_effect,
)

# Accepted, named once: they steer Poplar's compiler, precision on the IPU, logging or
# tooling, none of which the emulator's numbers (computed in float32 by XLA) or its simulated
# step time depend on.
_NO_EFFECT = {
    "Options": (
        "autoRoundNumIPUs",
        "connectionType",
        "enableProfiling",
        "enableStableNorm",
        "logCycleCount",
        "logDir",
        "modelName",
        "setAvailableMemoryProportionForRNG",
        "useIpuId",
        "useOfflineIpuTarget",
        # The IPU Model computes what an IPU computes, as the emulator does; the emulator's
        # simulated time stays the IPU-POD's.
        "useIpuModel",
        "enableFloatingPointExceptions",
        "sourceLocationExcludes",
        "relaxOptimizerAttributesChecks",
        "updatableNamedBuffers",
        "showCompilationProgressBar",
        "loadFromFile",
    ),
    "Precision": (
        "enableStochasticRounding",
        "runningStatisticsAlwaysFloat",
        "enableFloatingPointExceptions",
        "halfFloatCasting",
    ),
    "Jit": ("traceModel",),
    "Training": ("setConvolutionDithering", "setAutomaticLossScaling"),
    "TensorLocations": ("numIOTiles",),
    "_Popart": ("setPatterns", "setEngineOptions"),
    "Distributed": ("configureProcessId", "disable"),
}
# Refused: the emulator would compute other numbers than PopTorch does if it ignored them.
_REFUSED = {
    ("Training", "clipNormOfGradients"): "gradient clipping changes every update",
}


class Options:
    """``poptorch.Options()``: PopTorch options for this instance of a PopRun job (and, as
    :class:`PopDistOptions`, ``popdist.poptorch.Options(ipus_per_replica=None, **kwargs)``).

    As PopDist's, the replication factor is this instance's local replica count and the
    instance is configured as process ``getInstanceIndex()`` of ``getNumInstances()``. Errors
    name the class as the program spelt it (``_spelled``), and values are checked when set
    (``_poptorch_checks``).

    Args:
        ipus_per_replica: IPUs per replica of the program; checked against PopRun's
            ``--ipus-per-replica`` (None: PopRun's value).
        **kwargs: fields of :class:`popdist_emu.Options` to start from (e.g.
            ``prefetch_depth=2``).

    Raises:
        ValueError: ``ipus_per_replica`` differs from what PopRun was given.
    """

    _spelled = "poptorch.Options"

    def __init__(self, ipus_per_replica: int | None = None, **kwargs: Any) -> None:
        if ipus_per_replica is not None and not popdist.checkNumIpusPerReplica(ipus_per_replica):
            raise ValueError(
                f"{self._spelled}(ipus_per_replica={ipus_per_replica}): PopRun was "
                f"given --ipus-per-replica {popdist.getNumIpusPerReplica()}; pass that, or "
                f"start poprun-emu with --ipus-per-replica {ipus_per_replica}."
            )
        self.ipus_per_replica = ipus_per_replica or popdist.getNumIpusPerReplica()
        self._fields: dict[str, Any] = {"replication_factor": popdist.getNumLocalReplicas()}
        self._fields.update(kwargs)
        self.random_seed: int | None = None
        # PopTorch's default: buffers broadcast from replica 0, which it refuses for buffers
        # the forward changes; False keeps each replica's own (``poptorch._buffers``).
        self.broadcast_buffers = True
        self.executable_cache_dir: str | None = None
        # ``outputMode``'s: PopTorch's mode by name (None: Default) and EveryN's period.
        self.poptorch_output_mode: str | None = None
        self.output_return_period = 1
        self.process_id = (popdist.getInstanceIndex(), popdist.getNumInstances())
        # ``anchorTensor``'s: short name -> (tensor name, output mode or None, EveryN period).
        self.anchored_tensors: dict[str, tuple[str, str | None, int]] = {}
        self.synthetic_data = False  # ``enableSyntheticData``
        self.Training = _Training(self)
        self.TensorLocations = _TensorLocations(self)
        self.Precision = _Precision(self)
        self.Jit = type("_Jit", (_Group,), {"_group": "Jit"})(self)
        # ``_Popart.set("autoRecomputation", n)``'s PopART RecomputationType (None: not set,
        # PopTorch's default for the execution strategy: ``poptorch._placement``).
        self.auto_recomputation: int | None = None
        self._Popart = _Popart(self)
        self.Distributed = _Distributed(self)

    def _method(self, group: str, method: str) -> Callable[..., Options]:
        """A PopTorch method this class does not define: no-effect (warn) or refused."""
        reason = _REFUSED.get((group, method))
        qualified = method if group == "Options" else f"{group}.{method}"
        if reason is not None:

            def refuse(*_args: object, **_kwargs: object) -> Options:
                raise ValueError(
                    f"{self._spelled}.{qualified}: not supported by the emulator "
                    f"({reason}); remove the call."
                )

            return refuse
        if method in _NO_EFFECT.get(group, ()):

            def accept(*_args: object, **_kwargs: object) -> Options:
                no_effect(self._spelled, qualified)
                return self

            return accept
        owner = type(self) if group == "Options" else type(getattr(self, group))
        known = [*public_methods(owner), *_NO_EFFECT.get(group, ())]
        known += [m for g, m in _REFUSED if g == group]
        where = self._spelled if group == "Options" else f"{self._spelled}.{group}"
        # ``name`` given, so Python adds no suggestion of its own after ours.
        raise AttributeError(
            f"{where} has no {method!r}{close_match(method, known)}: it is not a PopTorch "
            f"option the emulator knows; docs/poptorch.md lists the ones supported.",
            name=method,
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("Training", "TensorLocations"):
            raise AttributeError(name)
        if name in {f.name for f in _emulator_fields()} or name in (
            "num_instances",
            "num_total_replicas",
            "replica_offset",
            "global_batch_size",
        ):
            return getattr(self.to_options(), name)
        return self._method("Options", name)

    # -------------------------------------------------------- PopTorch's option methods
    def _set(self, **values: object) -> Options:
        """PopTorch's setters: set, then return the options for the next call."""
        vars(self).update(values)
        return self

    def deviceIterations(self, n: int) -> Options:  # noqa: N802
        self._fields["device_iterations"] = count(f"{self._spelled}.deviceIterations", n)
        return self

    def replicationFactor(self, n: int) -> Options:  # noqa: N802
        """This instance's replicas; under ``poprun-emu`` PopRun's local replicas, which a
        different factor contradicts: refused, in the program's words, when a model is made
        with these options (``to_options``), as PopTorch finds it when it attaches the
        IPUs; options made and never used (Graphcore's basics walkthrough ends so) run."""
        self._fields["replication_factor"] = count(f"{self._spelled}.replicationFactor", n)
        return self

    def _check_replicas(self) -> None:
        """Refuses a replication factor PopRun's layout contradicts (``replicationFactor``)."""
        n, local = self._fields["replication_factor"], popdist.getNumLocalReplicas()
        if popdist.isPopdistEnvSet() and n != local:
            raise ValueError(
                f"{self._spelled}.replicationFactor({n}): poprun-emu gave this instance {local} "
                f"local replica(s) (--num-replicas {popdist.getNumTotalReplicas()} over "
                f"{popdist.getNumInstances()} instance(s)); call replicationFactor({local}) "
                f"(popdist.getNumLocalReplicas()), or run poprun-emu with --num-replicas "
                f"{n * popdist.getNumInstances()}."
            )

    def enableSyntheticData(self, enabled: bool) -> Options:  # noqa: N802
        """``True``: the device makes random inputs and no host IO runs (PopTorch's synthetic
        mode, ``poptorch._synthetic``); ``False``: host data, PopTorch's default."""
        return self._set(synthetic_data=bool(enabled))

    def clone(self) -> Options:
        """An independent copy (PopTorch's ``Options.clone``): changing it leaves this one."""
        return copy.deepcopy(self)

    def broadcastBuffers(self, broadcast_buffers: bool = True) -> Options:  # noqa: N802
        return self._set(broadcast_buffers=bool(broadcast_buffers))

    def randomSeed(self, seed: int) -> Options:  # noqa: N802
        return self._set(random_seed=count(f"{self._spelled}.randomSeed", seed, minimum=0))

    def enableExecutableCaching(self, path: str) -> Options:  # noqa: N802
        return self._set(executable_cache_dir=str(path))

    def outputMode(self, mode: object, output_return_period: int | None = None) -> Options:  # noqa: N802
        """Which micro-batches' outputs a call returns (``popdist_emu.poptorch._outputs``):
        All, Final, EveryN (every ``output_return_period``-th device iteration), Sum or
        Default (Final in training, All in inference)."""
        name = _name(mode)
        if name not in ("all", "final", "everyn", "sum", "default"):
            raise ValueError(
                f"{self._spelled}.outputMode({name!r}): PopTorch's modes are All, Final, "
                f"EveryN, Sum and Default; pass one of poptorch.OutputMode's members."
            )
        period = 1
        if name == "everyn":
            if (
                isinstance(output_return_period, bool)
                or not isinstance(output_return_period, int)
                or output_return_period < 1
            ):
                raise ValueError(
                    f"{self._spelled}.outputMode(EveryN, {output_return_period!r}): EveryN "
                    f"needs a period of at least 1, e.g. outputMode(poptorch.OutputMode.EveryN, "
                    f"10)."
                )
            period = output_return_period
        # The Trainer's own mode (the simulated copies of a plain Trainer): a loss per device
        # iteration for All and EveryN, the last for Final and Sum; Default leaves it unset.
        if name == "default":
            self._fields.pop("output_mode", None)
        else:
            self._fields["output_mode"] = "all" if name in ("all", "everyn") else "final"
        return self._set(poptorch_output_mode=name, output_return_period=period)

    anchorMode = outputMode  # PopTorch's older name  # noqa: N815

    def anchorTensor(  # noqa: N802
        self,
        short_name: str,
        long_name: str,
        output_mode: object = None,
        output_return_period: int = 1,
    ) -> Options:
        """Anchors the step's tensor ``long_name`` (``Gradient___fc.weight``, ...) for
        ``getAnchoredTensor(short_name)``, laid out by ``output_mode`` (None: the model's);
        which names a model has is checked at its compile (``poptorch._anchors``)."""
        if not isinstance(short_name, str) or not isinstance(long_name, str):
            raise ValueError(
                f"anchorTensor({short_name!r}, {long_name!r}): pass two strings, a name of your "
                "own and the tensor's (model.getTensorNames() lists them)."
            )
        mode = None if output_mode is None else _name(output_mode)
        if mode not in (None, "all", "final", "everyn", "sum", "default"):
            raise ValueError(
                f"anchorTensor({short_name!r}, output_mode={mode!r}): pass a poptorch.OutputMode "
                "member or None (the model's mode)."
            )
        period = output_return_period if mode == "everyn" else 1
        self.anchored_tensors[short_name] = (long_name, mode, period)
        return self

    def setAvailableMemoryProportion(self, proportion: dict[str, float] | float) -> Options:  # noqa: N802
        values = proportion.values() if isinstance(proportion, dict) else [proportion]
        for value in values:
            real = isinstance(value, numbers.Real) and not isinstance(value, bool)
            if not real or not 0.0 < float(value) <= 1.0:  # NaN is in no interval
                raise ValueError(
                    f"{self._spelled}.setAvailableMemoryProportion: {value!r} is not a number "
                    f"in (0, 1]; PopTorch takes e.g. {{'IPU0': 0.6}}."
                )
        self._fields["available_memory_proportion"] = proportion
        return self

    def setExecutionStrategy(self, strategy: object) -> Options:  # noqa: N802
        self._fields["execution_strategy"] = strategy
        return self

    @property
    def available_memory_proportion(self) -> dict[str, float] | float | None:
        """What ``setAvailableMemoryProportion`` set (None: not set)."""
        return self._fields.get("available_memory_proportion")

    @property
    def execution_strategy(self) -> object:
        """What ``setExecutionStrategy`` set (None: not set)."""
        return self._fields.get("execution_strategy")

    # ------------------------------------------------------------------ the emulator
    def to_options(self) -> EmulatorOptions:
        """The emulator's Options for what was set; the executable cache, if set, becomes
        JAX's persistent compilation cache (XLA's stands in for Poplar's).

        Raises:
            ValueError: a field the emulator refuses (e.g. a replication factor other than
                PopRun's local replicas).
        """
        self._check_replicas()
        if self.executable_cache_dir:
            # JAX only when a cache is set: ``import popdist.poptorch`` stays JAX-free (tested).
            import jax

            jax.config.update("jax_compilation_cache_dir", self.executable_cache_dir)
        return EmulatorOptions(**self._fields)


def _emulator_fields() -> tuple[dataclasses.Field[object], ...]:
    return dataclasses.fields(EmulatorOptions)


class PopDistOptions(Options):
    """``popdist.poptorch.Options(ipus_per_replica=None, **kwargs)``: PopDist's subclass of
    ``poptorch.Options`` (as PopDist's own is), the same mapping; errors name it so."""

    _spelled = "popdist.poptorch.Options"
