"""``popdist.popart``: PopDist's ``configureSessionOptions(opts)``."""

from popdist_emu._popdist_frameworks import configureSessionOptions

__all__ = ["configureSessionOptions"]
