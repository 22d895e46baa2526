"""Argument types for training scripts: every value checked at parse time, before JAX work.

A bad value is refused by argparse in one line with exit code 2, naming the flag, the value
and the fix, as ``poprun-emu`` refuses its own options; the examples use these so that
``--micro-batch-size 0`` or ``--save nodir/p.npz`` fail at once, not after compiling.

Example::

    from popdist_emu import arguments

    parser = arguments.ArgumentParser()
    parser.add_argument("--micro-batch-size", type=arguments.positive_int, default=8)
    parser.add_argument("--save", type=arguments.output_file)
"""

from popdist_emu._arguments import MAX_SEED as MAX_SEED
from popdist_emu._arguments import ArgumentParser as ArgumentParser
from popdist_emu._arguments import available_host_memory as available_host_memory
from popdist_emu._arguments import int_at_least as int_at_least
from popdist_emu._arguments import output_directory as output_directory
from popdist_emu._arguments import output_file as output_file
from popdist_emu._arguments import per_ipu_proportions as per_ipu_proportions
from popdist_emu._arguments import positive_float as positive_float
from popdist_emu._arguments import positive_int as positive_int
from popdist_emu._arguments import proportion as proportion
from popdist_emu._arguments import refuse_batch_unless_it_fits as refuse_batch_unless_it_fits
from popdist_emu._arguments import refuse_unless_it_fits as refuse_unless_it_fits
from popdist_emu._arguments import seed as seed

__all__ = [
    "MAX_SEED",
    "ArgumentParser",
    "available_host_memory",
    "int_at_least",
    "output_directory",
    "output_file",
    "per_ipu_proportions",
    "positive_float",
    "positive_int",
    "proportion",
    "refuse_batch_unless_it_fits",
    "refuse_unless_it_fits",
    "seed",
]
