"""The PopDist API and its framework helpers (PopTorch, PopART, TensorFlow); JAX-free.

``import popdist`` in a host program loads this package only, so it stays cheap: nothing here
imports JAX at module level.
"""

from popdist_emu.popdist import api as api
from popdist_emu.popdist._frameworks import configureSessionOptions as configureSessionOptions
from popdist_emu.popdist._frameworks import set_ipu_config as set_ipu_config
from popdist_emu.popdist._poptorch_options import Options as PopTorchOptions
from popdist_emu.popdist._poptorch_options import TensorLocationSettings as TensorLocationSettings
from popdist_emu.popdist.api import *  # noqa: F403 - the PopDist API, named once in api
from popdist_emu.popdist.api import API_NAMES as API_NAMES

__all__ = [
    "API_NAMES",
    "PopTorchOptions",
    "TensorLocationSettings",
    "api",
    "configureSessionOptions",
    "set_ipu_config",
]
__all__ += api.__all__
