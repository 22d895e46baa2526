"""The replicated training runtime: the Trainer, its reduce-and-update stages, RTS, offloading
and checkpoints."""

from popdist_emu.programs import StepShapes as StepShapes
from popdist_emu.programs import accumulator_struct as accumulator_struct
from popdist_emu.runtime._checkpoint import check_fits as check_checkpoint
from popdist_emu.runtime._checkpoint import full_opt_state as full_opt_state
from popdist_emu.runtime._checkpoint import place_opt_state as place_opt_state
from popdist_emu.runtime._checkpoint import read_meta as read_checkpoint_meta
from popdist_emu.runtime._checkpoint import restore_checkpoint as restore_checkpoint
from popdist_emu.runtime._checkpoint import save_checkpoint as save_checkpoint
from popdist_emu.runtime._checkpoint_owner import CheckpointError as CheckpointError
from popdist_emu.runtime._checkpoint_owner import claim_directory as claim_checkpoint_dir
from popdist_emu.runtime._compiled import CompiledStep as CompiledStep
from popdist_emu.runtime._compiled import UpdateProgram as UpdateProgram
from popdist_emu.runtime._diagnostics import NonFiniteGradientError as NonFiniteGradientError
from popdist_emu.runtime._elementwise import check_elementwise as check_elementwise
from popdist_emu.runtime._layerwise import ClipByName as ClipByName
from popdist_emu.runtime._layerwise import LayerwiseOptimiser as LayerwiseOptimiser
from popdist_emu.runtime._layerwise import lamb as lamb
from popdist_emu.runtime._layerwise import lars as lars
from popdist_emu.runtime._layerwise import layerwise as layerwise
from popdist_emu.runtime._offload import OffloadedUpdate as OffloadedUpdate
from popdist_emu.runtime._offload import StreamingState as StreamingState
from popdist_emu.runtime._reduce_update import AllReduceUpdate as AllReduceUpdate
from popdist_emu.runtime._reduce_update import ReduceUpdateStage as ReduceUpdateStage
from popdist_emu.runtime._reduce_update import StageResult as StageResult
from popdist_emu.runtime._replica_step import NonScalarLossError as NonScalarLossError
from popdist_emu.runtime._replica_step import Optimiser as Optimiser
from popdist_emu.runtime._replica_step import TrainState as TrainState
from popdist_emu.runtime._sharded_update import ShardedOptState as ShardedOptState
from popdist_emu.runtime._sharded_update import ShardedReduceUpdate as ShardedReduceUpdate
from popdist_emu.runtime._sharding import ShardingError as ShardingError
from popdist_emu.runtime._sharding import ShardingPlan as ShardingPlan
from popdist_emu.runtime._sharding import plan_sharding as plan_sharding
from popdist_emu.runtime._stage_choice import LeverInfo as LeverInfo
from popdist_emu.runtime._stage_choice import StepCollectives as StepCollectives
from popdist_emu.runtime._trainer import Trainer as Trainer

__all__ = [
    "AllReduceUpdate",
    "CheckpointError",
    "ClipByName",
    "CompiledStep",
    "LayerwiseOptimiser",
    "LeverInfo",
    "NonFiniteGradientError",
    "NonScalarLossError",
    "OffloadedUpdate",
    "Optimiser",
    "ReduceUpdateStage",
    "ShardedOptState",
    "ShardedReduceUpdate",
    "ShardingError",
    "ShardingPlan",
    "StageResult",
    "StepCollectives",
    "StepShapes",
    "StreamingState",
    "TrainState",
    "Trainer",
    "UpdateProgram",
    "accumulator_struct",
    "check_checkpoint",
    "check_elementwise",
    "claim_checkpoint_dir",
    "full_opt_state",
    "lamb",
    "lars",
    "layerwise",
    "place_opt_state",
    "plan_sharding",
    "read_checkpoint_meta",
    "restore_checkpoint",
    "save_checkpoint",
]
