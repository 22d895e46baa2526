"""``popdist.tensorflow``: PopDist's ``set_ipu_config(config, ipus_per_replica,
configure_device=True)``."""

from popdist_emu._popdist_frameworks import set_ipu_config

__all__ = ["set_ipu_config"]
