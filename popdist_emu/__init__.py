"""PopDist API and the replicated training runtime of the emulator.

The PopDist names are imported eagerly and pull in no JAX, so ``import popdist`` in a host
program stays cheap; the training runtime's names are loaded on first use.
"""

from popdist_emu._popdist_api import POPDIST_NAMES as _POPDIST_NAMES
from popdist_emu._popdist_api import checkNumIpusPerReplica as checkNumIpusPerReplica
from popdist_emu._popdist_api import execute_on_instances as execute_on_instances
from popdist_emu._popdist_api import getDeviceId as getDeviceId
from popdist_emu._popdist_api import getInstanceIndex as getInstanceIndex
from popdist_emu._popdist_api import getLocalInstanceIndex as getLocalInstanceIndex
from popdist_emu._popdist_api import getNumInstances as getNumInstances
from popdist_emu._popdist_api import getNumIpusPerReplica as getNumIpusPerReplica
from popdist_emu._popdist_api import getNumLocalReplicas as getNumLocalReplicas
from popdist_emu._popdist_api import getNumTotalReplicas as getNumTotalReplicas
from popdist_emu._popdist_api import getReplicaIndexOffset as getReplicaIndexOffset
from popdist_emu._popdist_api import init as init
from popdist_emu._popdist_api import isPopdistEnvSet as isPopdistEnvSet

# Runtime and simulation names -> the private module that defines them; imported lazily
# (they need JAX). These are what a user's program needs; everything else is private.
_LAZY: dict[str, str] = {
    # training runtime
    "Options": "popdist_emu._options",
    "Trainer": "popdist_emu._runtime",
    "TrainState": "popdist_emu._replica_step",
    "CompiledStep": "popdist_emu._runtime",
    "LeverInfo": "popdist_emu._runtime",
    "NonFiniteGradientError": "popdist_emu._runtime",
    "NonScalarLossError": "popdist_emu._replica_step",
    "ShardingError": "popdist_emu._sharding",
    "is_offline_mode": "popdist_emu._options",
    # the replaceable reduce-and-update stage (RTS and offloading are stages too)
    "ReduceUpdateStage": "popdist_emu._reduce_update",
    "StageResult": "popdist_emu._reduce_update",
    "AllReduceUpdate": "popdist_emu._reduce_update",
    "ShardedReduceUpdate": "popdist_emu._sharded_update",
    "OffloadedUpdate": "popdist_emu._offload",
    "ShardedOptState": "popdist_emu._sharded_update",
    "StreamingState": "popdist_emu._offload",
    # input: loader, host-IO infeed, the example dataset, progress
    "ReplicaLoader": "popdist_emu._loader",
    "Infeed": "popdist_emu._infeed",
    "InfeedError": "popdist_emu._infeed",
    "InfeedStats": "popdist_emu._infeed",
    # model parallelism: blocks, stages and execution strategies
    "Block": "popdist_emu._pipeline",
    "BlockModel": "popdist_emu._pipeline",
    "Pipeline": "popdist_emu._pipeline",
    "PipelineError": "popdist_emu._pipeline_rules",
    "PipelinedExecution": "popdist_emu._pipeline",
    "ShardedExecution": "popdist_emu._pipeline",
    "Stage": "popdist_emu._pipeline",
    "compress": "popdist_emu._infeed",
    "decompress": "popdist_emu._infeed",
    "DigitsSplit": "popdist_emu._digits",
    "load_digits_split": "popdist_emu._digits",
    "Progress": "popdist_emu._progress",
    # lose nothing: atomic writes, checkpoint and resume
    "atomic_write": "popdist_emu._files",
    "write_atomically": "popdist_emu._files",
    "CheckpointError": "popdist_emu._checkpoint",
    "save_checkpoint": "popdist_emu._checkpoint",
    "restore_checkpoint": "popdist_emu._checkpoint",
    "read_checkpoint_meta": "popdist_emu._checkpoint",
    "show_phases": "popdist_emu._progress",
    # simulated IPU-POD time and memory
    "Program": "popdist_emu._profile",
    "compile_program": "popdist_emu._profile",
    "profile_programs": "popdist_emu._profile",
    "profile_step": "popdist_emu._profile",
    "simulate": "popdist_emu._simulation",
    "simulate_profile": "popdist_emu._simulation",
    "set_available_memory": "popdist_emu._matmuls",
    "with_infeed_stats": "popdist_emu._simulation",
    "report_simulation": "popdist_emu._simulation",
}

# Public names that differ from the private definition's.
_RENAMED = {"read_checkpoint_meta": "read_meta"}

__all__ = [*_POPDIST_NAMES, *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'popdist_emu' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value
