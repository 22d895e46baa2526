"""Model parallelism: blocks, stages, the pipelined and sharded strategies and their rules."""

from popdist_emu.pipeline._model import Block as Block
from popdist_emu.pipeline._model import BlockModel as BlockModel
from popdist_emu.pipeline._model import Pipeline as Pipeline
from popdist_emu.pipeline._model import PipelinedExecution as PipelinedExecution
from popdist_emu.pipeline._model import ShardedExecution as ShardedExecution
from popdist_emu.pipeline._model import Stage as Stage
from popdist_emu.pipeline._model import float_mask as float_mask
from popdist_emu.pipeline._model import make_pipeline as make_pipeline
from popdist_emu.pipeline._model import split_floats as split_floats
from popdist_emu.pipeline._model import stage_vjp as stage_vjp
from popdist_emu.pipeline._rules import PipelineError as PipelineError
from popdist_emu.pipeline._rules import check_gradient_accumulation as check_gradient_accumulation

__all__ = [
    "Block",
    "BlockModel",
    "Pipeline",
    "PipelineError",
    "PipelinedExecution",
    "ShardedExecution",
    "Stage",
    "check_gradient_accumulation",
    "float_mask",
    "make_pipeline",
    "split_floats",
    "stage_vjp",
]
