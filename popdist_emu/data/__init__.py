"""Input: the replica loader, the host-IO infeed and the shipped digits dataset."""

from popdist_emu.data._digits import DigitsSplit as DigitsSplit
from popdist_emu.data._digits import load_digits_split as load_digits_split
from popdist_emu.data._infeed import DEFAULT_PREFETCH_DEPTH as DEFAULT_PREFETCH_DEPTH
from popdist_emu.data._infeed import Infeed as Infeed
from popdist_emu.data._infeed import InfeedError as InfeedError
from popdist_emu.data._infeed import InfeedStats as InfeedStats
from popdist_emu.data._infeed import compress as compress
from popdist_emu.data._infeed import decompress as decompress
from popdist_emu.data._loader import ReplicaLoader as ReplicaLoader

__all__ = [
    "DEFAULT_PREFETCH_DEPTH",
    "DigitsSplit",
    "Infeed",
    "InfeedError",
    "InfeedStats",
    "ReplicaLoader",
    "compress",
    "decompress",
    "load_digits_split",
]
