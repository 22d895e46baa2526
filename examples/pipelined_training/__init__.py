"""What the pipelined examples share, and the models too large to sit in their scripts.

The examples (``bert.py``, ``vit.py``, ``resnext_training.py``, ``efficientnet_training.py``,
``train.py``) find this package beside them, as Python puts a script's folder on
``sys.path``. One concept per private module, this face the only way in:

- ``_layers``: a transformer's layers in plain JAX, and weights initialised from shapes;
- ``_optimisers``: LAMB and AdamW computed in float32, their state stored as asked;
- ``_flags``: the shared training, placement and precision flags and the options they set;
- ``_image_training``: the image examples' trainer, simulation, digits and report;
- ``_bert_model`` and ``_bert_data``: BERT's blocks, and its synthetic batches;
- ``_tutorial_network``: the PopTorch pipelining tutorial's network (``train.py``).
"""

from pipelined_training._bert_data import bert_batch_shapes as bert_batch_shapes
from pipelined_training._bert_data import synthetic_pretraining_data as synthetic_pretraining_data
from pipelined_training._bert_data import synthetic_squad_data as synthetic_squad_data
from pipelined_training._bert_model import BERT_CONFIGS as BERT_CONFIGS
from pipelined_training._bert_model import BERT_TASKS as BERT_TASKS
from pipelined_training._bert_model import bert_block_model as bert_block_model
from pipelined_training._bert_model import bert_param_shapes as bert_param_shapes
from pipelined_training._bert_model import init_bert_params as init_bert_params
from pipelined_training._flags import DTYPES as DTYPES
from pipelined_training._flags import add_training_arguments as add_training_arguments
from pipelined_training._flags import check_steps as check_steps
from pipelined_training._flags import layers_per_ipu as layers_per_ipu
from pipelined_training._flags import pipeline_options as pipeline_options
from pipelined_training._flags import refuse as refuse
from pipelined_training._image_training import (
    add_convolution_arguments as add_convolution_arguments,
)
from pipelined_training._image_training import build_and_run as build_and_run
from pipelined_training._image_training import chain_logits as chain_logits
from pipelined_training._image_training import cross_entropy as cross_entropy
from pipelined_training._image_training import image_parser as image_parser
from pipelined_training._image_training import parse_image_arguments as parse_image_arguments
from pipelined_training._image_training import stages_per_ipu as stages_per_ipu
from pipelined_training._layers import attention as attention
from pipelined_training._layers import dense as dense
from pipelined_training._layers import init_from_shapes as init_from_shapes
from pipelined_training._layers import layer_norm as layer_norm
from pipelined_training._optimisers import adamw_in_float32 as adamw_in_float32
from pipelined_training._optimisers import in_float32 as in_float32
from pipelined_training._optimisers import lamb_in_float32 as lamb_in_float32
from pipelined_training._tutorial_network import TUTORIAL_BLOCK_MODEL as TUTORIAL_BLOCK_MODEL
from pipelined_training._tutorial_network import TUTORIAL_STAGES as TUTORIAL_STAGES
from pipelined_training._tutorial_network import init_tutorial_params as init_tutorial_params
from pipelined_training._tutorial_network import tutorial_loss as tutorial_loss
from pipelined_training._tutorial_network import tutorial_network as tutorial_network

__all__ = [
    "BERT_CONFIGS",
    "BERT_TASKS",
    "DTYPES",
    "TUTORIAL_BLOCK_MODEL",
    "TUTORIAL_STAGES",
    "adamw_in_float32",
    "add_convolution_arguments",
    "add_training_arguments",
    "attention",
    "bert_batch_shapes",
    "bert_block_model",
    "bert_param_shapes",
    "build_and_run",
    "chain_logits",
    "check_steps",
    "cross_entropy",
    "dense",
    "image_parser",
    "in_float32",
    "init_bert_params",
    "init_from_shapes",
    "init_tutorial_params",
    "lamb_in_float32",
    "layer_norm",
    "layers_per_ipu",
    "parse_image_arguments",
    "pipeline_options",
    "refuse",
    "stages_per_ipu",
    "synthetic_pretraining_data",
    "synthetic_squad_data",
    "tutorial_loss",
    "tutorial_network",
]
