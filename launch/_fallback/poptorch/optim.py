"""``poptorch.optim`` where no Poplar SDK provides it: the emulator's (torch needed)."""

from popdist_emu.poptorch.optim import SGD, Adam, AdamW

__all__ = ["SGD", "Adam", "AdamW"]
