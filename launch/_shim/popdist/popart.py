"""``popdist.popart``: PopDist's ``configureSessionOptions(opts)``."""

from popdist_emu.popdist import configureSessionOptions

__all__ = ["configureSessionOptions"]
