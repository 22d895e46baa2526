"""``popdist.poptorch``: PopDist's PopTorch helper, ``Options(ipus_per_replica=None, **kwargs)``.

The options accept the PopTorch option methods real host code calls and map them onto the
emulator's ``popdist_emu.Options`` (see ``popdist_emu.popdist._poptorch_options``);
``TensorLocationSettings`` stands in for PopTorch's, which ``setOptimizerLocation`` takes.
"""

from popdist_emu.popdist import TensorLocationSettings
from popdist_emu.popdist._poptorch_options import PopDistOptions as Options

__all__ = ["Options", "TensorLocationSettings"]
