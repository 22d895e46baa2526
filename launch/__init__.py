"""The ``poprun-emu`` launcher: PopRun options to MPI instances. Imports no JAX.

``poprun-emu [options] program [args]`` (or ``python -m launch``) validates the layout, starts
one MPI process per instance with PopRun's ``POPDIST_*`` environment and watches the job.
"""

from launch._cli import help_text as help_text
from launch._cli import main as main
from launch._cli import validate as validate
from launch._errors import UsageError as UsageError
from launch._hosts import parse_hosts as parse_hosts
from launch._mpi import MpiArgs as MpiArgs
from launch._mpi import adapt_mpi_args as adapt_mpi_args
from launch._mpi import mpiexec_command as mpiexec_command
from launch._options import LaunchOptions as LaunchOptions
from launch._options import parse_command_line as parse_command_line
from launch._topology import format_topology as format_topology
from launch._version import launcher_version as launcher_version

__all__ = [
    "LaunchOptions",
    "MpiArgs",
    "UsageError",
    "adapt_mpi_args",
    "format_topology",
    "help_text",
    "launcher_version",
    "main",
    "mpiexec_command",
    "parse_command_line",
    "parse_hosts",
    "validate",
]
