"""PopDist API and the replicated training runtime of the emulator.

The PopDist names are imported eagerly and pull in no JAX, so ``import popdist`` in a host
program stays cheap; the training runtime's names are loaded on first use.
"""

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

# Runtime names -> the private module that defines them; imported lazily (they need JAX).
_LAZY: dict[str, str] = {
    "AllReduceUpdate": "popdist_emu._reduce_update",
    "CompiledStep": "popdist_emu._runtime",
    "DigitsSplit": "popdist_emu._digits",
    "Infeed": "popdist_emu._infeed",
    "InfeedError": "popdist_emu._infeed",
    "InfeedStats": "popdist_emu._infeed",
    "LeverInfo": "popdist_emu._runtime",
    "NonFiniteGradientError": "popdist_emu._runtime",
    "NonScalarLossError": "popdist_emu._replica_step",
    "OffloadedUpdate": "popdist_emu._offload",
    "Options": "popdist_emu._options",
    "Progress": "popdist_emu._progress",
    "ReduceUpdateStage": "popdist_emu._reduce_update",
    "ReplicaLoader": "popdist_emu._loader",
    "ShardedOptState": "popdist_emu._sharded_update",
    "ShardedReduceUpdate": "popdist_emu._sharded_update",
    "ShardingError": "popdist_emu._sharding",
    "ShardingPlan": "popdist_emu._sharding",
    "StageResult": "popdist_emu._reduce_update",
    "StreamTraffic": "popdist_emu._offload",
    "StreamingState": "popdist_emu._offload",
    "TrainState": "popdist_emu._replica_step",
    "Trainer": "popdist_emu._runtime",
    "Block": "popdist_emu._pipeline",
    "BlockModel": "popdist_emu._pipeline",
    "Pipeline": "popdist_emu._pipeline",
    "PipelineError": "popdist_emu._pipeline_rules",
    "PipelinedExecution": "popdist_emu._pipeline",
    "ShardedExecution": "popdist_emu._pipeline",
    "Stage": "popdist_emu._pipeline",
    "check_elementwise": "popdist_emu._sharding",
    "compress": "popdist_emu._infeed",
    "decompress": "popdist_emu._infeed",
    "is_offline_mode": "popdist_emu._options",
    "load_digits_split": "popdist_emu._digits",
    "offload_traffic": "popdist_emu._offload",
    "plan_sharding": "popdist_emu._sharding",
    "report_simulation": "popdist_emu._simulation",
    "resolve_domain": "popdist_emu._sharding",
    "shard": "popdist_emu._sharding",
    "shard_size": "popdist_emu._sharding",
    "sharded_stage": "popdist_emu._sharded_update",
    "sharded_state_nbytes": "popdist_emu._sharded_update",
    "simulate": "popdist_emu._simulation",
    "simulate_profile": "popdist_emu._simulation",
    "set_available_memory": "popdist_emu._matmuls",
    "stream_in": "popdist_emu._offload",
    "stream_out": "popdist_emu._offload",
    "unshard": "popdist_emu._sharding",
    "with_infeed_stats": "popdist_emu._simulation",
}

__all__ = [
    "checkNumIpusPerReplica",
    "execute_on_instances",
    "getDeviceId",
    "getInstanceIndex",
    "getLocalInstanceIndex",
    "getNumInstances",
    "getNumIpusPerReplica",
    "getNumLocalReplicas",
    "getNumTotalReplicas",
    "getReplicaIndexOffset",
    "init",
    "isPopdistEnvSet",
    *_LAZY,
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'popdist_emu' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
