"""The contract between the launcher and the instances, JAX-free, at the bottom of the house.

``poprun-emu`` (``launch``) and the instances (``popdist_emu``, ``gcl``) share what is here and
nothing else: every environment variable, the job configuration and the bootstraps' pid
files (``_environment``), files written so that a reader never sees a part of one and read
with a bound (``_files``), how a child is started in its own session, whether a process
lives and how a process group past its bound is ended (``_processes``), the machine's
memory (``_machine``), the request ``poprun-emu-scaling`` hands a program (``_sweep``) and
the refit of ``--calibrate-from`` run in its own process (``_refit``). It imports only
``hardware`` (the layout and the systems), so the launcher starts without JAX, and both sides
import it through this face.
"""

from contract._environment import DEFAULT_GCL_TIMEOUT_S as DEFAULT_GCL_TIMEOUT_S
from contract._environment import EMULATOR_VARIABLES as EMULATOR_VARIABLES
from contract._environment import ENV_BOOTSTRAP as ENV_BOOTSTRAP
from contract._environment import ENV_CALIBRATION_FAMILY as ENV_CALIBRATION_FAMILY
from contract._environment import ENV_CALIBRATION_FILE as ENV_CALIBRATION_FILE
from contract._environment import ENV_COMMAND as ENV_COMMAND
from contract._environment import ENV_GCL_ON_FAILURE as ENV_GCL_ON_FAILURE
from contract._environment import ENV_GCL_TIMEOUT as ENV_GCL_TIMEOUT
from contract._environment import ENV_GCL_WAITING_FILE as ENV_GCL_WAITING_FILE
from contract._environment import ENV_HOSTS as ENV_HOSTS
from contract._environment import ENV_INSTANCE_INDEX as ENV_INSTANCE_INDEX
from contract._environment import ENV_JAX_CACHE_DIR as ENV_JAX_CACHE_DIR
from contract._environment import (
    ENV_JAX_CACHE_MIN_COMPILE_SECONDS as ENV_JAX_CACHE_MIN_COMPILE_SECONDS,
)
from contract._environment import ENV_JAX_CACHE_MIN_ENTRY_BYTES as ENV_JAX_CACHE_MIN_ENTRY_BYTES
from contract._environment import ENV_JOB_DIR as ENV_JOB_DIR
from contract._environment import ENV_LIBMPI as ENV_LIBMPI
from contract._environment import ENV_LOCAL_INSTANCE_INDEX as ENV_LOCAL_INSTANCE_INDEX
from contract._environment import ENV_MPI4PY_LIBMPI as ENV_MPI4PY_LIBMPI
from contract._environment import ENV_MPIEXEC as ENV_MPIEXEC
from contract._environment import ENV_NUM_IPUS_PER_REPLICA as ENV_NUM_IPUS_PER_REPLICA
from contract._environment import ENV_NUM_LOCAL_REPLICAS as ENV_NUM_LOCAL_REPLICAS
from contract._environment import ENV_NUM_TOTAL_REPLICAS as ENV_NUM_TOTAL_REPLICAS
from contract._environment import ENV_OFFLINE as ENV_OFFLINE
from contract._environment import ENV_PROGRESS as ENV_PROGRESS
from contract._environment import ENV_REPLICA_INDEX_OFFSET as ENV_REPLICA_INDEX_OFFSET
from contract._environment import ENV_REPORT_DIR as ENV_REPORT_DIR
from contract._environment import ENV_SCALING_REQUEST as ENV_SCALING_REQUEST
from contract._environment import ENV_SYSTEM as ENV_SYSTEM
from contract._environment import (
    ENV_UNIFORM_REPLICAS_PER_INSTANCE as ENV_UNIFORM_REPLICAS_PER_INSTANCE,
)
from contract._environment import POPRUN_VARIABLES as POPRUN_VARIABLES
from contract._environment import InstanceEnvironment as InstanceEnvironment
from contract._environment import JobConfig as JobConfig
from contract._environment import layout_environment as layout_environment
from contract._environment import leaving_path as leaving_path
from contract._environment import offline_mode as offline_mode
from contract._environment import orphaned_path as orphaned_path
from contract._environment import pid_file_instances as pid_file_instances
from contract._environment import pid_path as pid_path
from contract._environment import read_job_config as read_job_config
from contract._environment import read_pid_file as read_pid_file
from contract._environment import status_path as status_path
from contract._environment import waiting_path as waiting_path
from contract._files import FileTooLargeError as FileTooLargeError
from contract._files import arg_max as arg_max
from contract._files import atomic_write as atomic_write
from contract._files import directory_problem as directory_problem
from contract._files import make_directories as make_directories
from contract._files import open_for_appending_lines as open_for_appending_lines
from contract._files import output_problem as output_problem
from contract._files import probe_problem as probe_problem
from contract._files import read_bounded as read_bounded
from contract._files import special_kind as special_kind
from contract._files import write_atomically as write_atomically
from contract._machine import available_memory_bytes as available_memory_bytes
from contract._machine import total_memory_bytes as total_memory_bytes
from contract._numbers import MAX_TIMEOUT_S as MAX_TIMEOUT_S
from contract._numbers import MIN_TIMEOUT_S as MIN_TIMEOUT_S
from contract._numbers import ascii_seconds as ascii_seconds
from contract._numbers import ascii_whole as ascii_whole
from contract._processes import ENDING_SIGNALS as ENDING_SIGNALS
from contract._processes import end_process_group as end_process_group
from contract._processes import ending_signals_interrupt as ending_signals_interrupt
from contract._processes import has_ended as has_ended
from contract._processes import interrupt_signal as interrupt_signal
from contract._processes import pid_alive as pid_alive
from contract._processes import start_session as start_session
from contract._processes import stat_fields as stat_fields
from contract._refit import REFIT_TIMEOUT_S as REFIT_TIMEOUT_S
from contract._refit import RefitError as RefitError
from contract._refit import refit_calibration as refit_calibration
from contract._sweep import COLLECTIVE_PHASES as COLLECTIVE_PHASES
from contract._sweep import TIER_PHASES as TIER_PHASES
from contract._sweep import SweepPoint as SweepPoint
from contract._sweep import read_request as read_request
from contract._sweep import system_name as system_name
from contract._sweep import write_request as write_request

__all__ = [
    "COLLECTIVE_PHASES",
    "DEFAULT_GCL_TIMEOUT_S",
    "EMULATOR_VARIABLES",
    "ENDING_SIGNALS",
    "ENV_BOOTSTRAP",
    "ENV_CALIBRATION_FAMILY",
    "ENV_CALIBRATION_FILE",
    "ENV_COMMAND",
    "ENV_GCL_ON_FAILURE",
    "ENV_GCL_TIMEOUT",
    "ENV_GCL_WAITING_FILE",
    "ENV_HOSTS",
    "ENV_INSTANCE_INDEX",
    "ENV_JAX_CACHE_DIR",
    "ENV_JAX_CACHE_MIN_COMPILE_SECONDS",
    "ENV_JAX_CACHE_MIN_ENTRY_BYTES",
    "ENV_JOB_DIR",
    "ENV_LIBMPI",
    "ENV_LOCAL_INSTANCE_INDEX",
    "ENV_MPI4PY_LIBMPI",
    "ENV_MPIEXEC",
    "ENV_NUM_IPUS_PER_REPLICA",
    "ENV_NUM_LOCAL_REPLICAS",
    "ENV_NUM_TOTAL_REPLICAS",
    "ENV_OFFLINE",
    "ENV_PROGRESS",
    "ENV_REPLICA_INDEX_OFFSET",
    "ENV_REPORT_DIR",
    "ENV_SCALING_REQUEST",
    "ENV_SYSTEM",
    "ENV_UNIFORM_REPLICAS_PER_INSTANCE",
    "MAX_TIMEOUT_S",
    "MIN_TIMEOUT_S",
    "POPRUN_VARIABLES",
    "REFIT_TIMEOUT_S",
    "TIER_PHASES",
    "FileTooLargeError",
    "InstanceEnvironment",
    "JobConfig",
    "RefitError",
    "SweepPoint",
    "arg_max",
    "ascii_seconds",
    "ascii_whole",
    "atomic_write",
    "available_memory_bytes",
    "directory_problem",
    "end_process_group",
    "ending_signals_interrupt",
    "has_ended",
    "interrupt_signal",
    "layout_environment",
    "leaving_path",
    "make_directories",
    "offline_mode",
    "open_for_appending_lines",
    "orphaned_path",
    "output_problem",
    "pid_alive",
    "pid_file_instances",
    "pid_path",
    "probe_problem",
    "read_bounded",
    "read_job_config",
    "read_pid_file",
    "read_request",
    "refit_calibration",
    "special_kind",
    "start_session",
    "stat_fields",
    "status_path",
    "system_name",
    "total_memory_bytes",
    "waiting_path",
    "write_atomically",
    "write_request",
]
