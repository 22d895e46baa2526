"""Model parallelism: blocks, stages, the pipelined and sharded strategies and their rules."""

from popdist_emu.pipeline._model import Block as Block
from popdist_emu.pipeline._model import BlockModel as BlockModel
from popdist_emu.pipeline._model import Pipeline as Pipeline
from popdist_emu.pipeline._model import PipelinedExecution as PipelinedExecution
from popdist_emu.pipeline._model import ShardedExecution as ShardedExecution
from popdist_emu.pipeline._model import Stage as Stage
from popdist_emu.pipeline._model import make_pipeline as make_pipeline
from popdist_emu.pipeline._rules import PipelineError as PipelineError
from popdist_emu.pipeline._rules import check_gradient_accumulation as check_gradient_accumulation
from popdist_emu.pipeline._stage_programs import STAGE_FUNCTIONS as STAGE_FUNCTIONS
from popdist_emu.pipeline._stage_programs import CompileFn as CompileFn
from popdist_emu.pipeline._stage_programs import StageFunctions as StageFunctions
from popdist_emu.pipeline._stage_programs import StagePrograms as StagePrograms
from popdist_emu.pipeline._stage_programs import float_mask as float_mask
from popdist_emu.pipeline._stage_programs import split_floats as split_floats
from popdist_emu.pipeline._stage_programs import stage_functions as stage_functions
from popdist_emu.pipeline._stage_programs import stage_vjp as stage_vjp

__all__ = [
    "STAGE_FUNCTIONS",
    "Block",
    "BlockModel",
    "CompileFn",
    "Pipeline",
    "PipelineError",
    "PipelinedExecution",
    "ShardedExecution",
    "Stage",
    "StageFunctions",
    "StagePrograms",
    "check_gradient_accumulation",
    "float_mask",
    "make_pipeline",
    "split_floats",
    "stage_functions",
    "stage_vjp",
]
