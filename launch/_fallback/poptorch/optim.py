"""``poptorch.optim`` where no Poplar SDK provides it: the emulator's (torch needed)."""

from popdist_emu.poptorch.optim import LAMB, SGD, Adam, AdamW, Optimizer, RMSprop

__all__ = ["LAMB", "SGD", "Adam", "AdamW", "Optimizer", "RMSprop"]
