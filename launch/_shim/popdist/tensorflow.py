"""``popdist.tensorflow``: PopDist's ``set_ipu_config(config, ipus_per_replica,
configure_device=True)``."""

from popdist_emu.popdist import set_ipu_config

__all__ = ["set_ipu_config"]
