"""``poptorch.enums`` where no Poplar SDK provides it: the emulator's, every name of it."""

from popdist_emu.poptorch import enums as _enums
from popdist_emu.poptorch.enums import *  # noqa: F403

__all__: list[str] = []
__all__ += _enums.__all__
