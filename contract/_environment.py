"""The launcher-instance contract: every variable name, the job configuration, an instance's view.

``poprun-emu`` (the ``launch`` package) and the instances (``popdist_emu``) talk through the
environment only. This module is the one place that spells the variables: PopRun's
``POPDIST_*`` (what unmodified PopDist code reads) and the emulator's ``POPDIST_EMU_*``. Two
values cross the boundary:

- :class:`JobConfig`, what the launcher decided for the whole job (layout, system, report
  directory, offline mode, executable cache, ...), passed to every bootstrap as JSON in one
  variable (:data:`ENV_BOOTSTRAP`);
- :class:`InstanceEnvironment`, what one instance sees: built by the launcher from the
  ``JobConfig`` and an instance index (:meth:`InstanceEnvironment.to_environ`), read back once
  by the instance (:meth:`InstanceEnvironment.from_environ`). The round trip is the identity.

Pure Python: imports no JAX, so the launcher stays fast.

References:
    PopRun/PopDist User Guide, "Configuration" and "Python API"
    (https://docs.graphcore.ai/projects/poprun-user-guide/en/latest/): PopRun exports the
    layout to each instance as ``POPDIST_*`` variables; a ``poprun -vv`` log listing them is
    in the EIDF Graphcore training notes
    (https://epcced.github.io/eidf-docs/services/graphcore/training/L2_multiple_IPU/).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections.abc import Mapping

from contract._files import FileTooLargeError, read_bounded
from hardware import LayoutError, ReplicaLayout

# -- PopRun's variables (what PopDist reads) ---------------------------------------------------
ENV_NUM_TOTAL_REPLICAS = "POPDIST_NUM_TOTAL_REPLICAS"
ENV_NUM_LOCAL_REPLICAS = "POPDIST_NUM_LOCAL_REPLICAS"
ENV_NUM_IPUS_PER_REPLICA = "POPDIST_NUM_IPUS_PER_REPLICA"
ENV_REPLICA_INDEX_OFFSET = "POPDIST_REPLICA_INDEX_OFFSET"
ENV_LOCAL_INSTANCE_INDEX = "POPDIST_LOCAL_INSTANCE_INDEX"
ENV_UNIFORM_REPLICAS_PER_INSTANCE = "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"
POPRUN_VARIABLES = (
    ENV_NUM_TOTAL_REPLICAS,
    ENV_NUM_LOCAL_REPLICAS,
    ENV_NUM_IPUS_PER_REPLICA,
    ENV_REPLICA_INDEX_OFFSET,
    ENV_LOCAL_INSTANCE_INDEX,
    ENV_UNIFORM_REPLICAS_PER_INSTANCE,
)

# -- The emulator's own variables ----------------------------------------------------------------
ENV_INSTANCE_INDEX = "POPDIST_EMU_INSTANCE_INDEX"  # global instance index
ENV_HOSTS = "POPDIST_EMU_HOSTS"  # simulated host names, comma-separated
ENV_SYSTEM = "POPDIST_EMU_SYSTEM"  # --system; empty = smallest Mk2 POD that holds the job
ENV_REPORT_DIR = "POPDIST_EMU_REPORT_DIR"  # --report-dir; empty = no report files
ENV_OFFLINE = "POPDIST_EMU_OFFLINE"  # "1" under --offline-mode
ENV_JOB_DIR = "POPDIST_EMU_JOB_DIR"  # the launcher's job directory (pid/status files)
ENV_PROGRESS = "POPDIST_EMU_PROGRESS"  # "1": the launcher's terminal wants a progress bar
ENV_BOOTSTRAP = "POPDIST_EMU_BOOTSTRAP"  # the JobConfig, as JSON, for the bootstraps
ENV_COMMAND = "POPDIST_EMU_COMMAND"  # the poprun-emu command line, for the reports
# --calibration-family: a calibrated family's whole-program parameters; empty = the structural
ENV_CALIBRATION_FAMILY = "POPDIST_EMU_CALIBRATION_FAMILY"
# poprun-emu-scaling -> the program: a request file listing every point of a sweep
ENV_SCALING_REQUEST = "POPDIST_EMU_SCALING_REQUEST"
# --calibrate-from -> the job: the calibration file its refit wrote; empty = the packaged one
ENV_CALIBRATION_FILE = "POPDIST_EMU_CALIBRATION_FILE"
EMULATOR_VARIABLES = (
    ENV_INSTANCE_INDEX,
    ENV_HOSTS,
    ENV_SYSTEM,
    ENV_REPORT_DIR,
    ENV_OFFLINE,
    ENV_JOB_DIR,
    ENV_PROGRESS,
    ENV_BOOTSTRAP,
    ENV_COMMAND,
    ENV_CALIBRATION_FAMILY,
    ENV_CALIBRATION_FILE,
)

# -- Choosing a system MPI (read by the launcher from the user's environment) ------------------
ENV_MPIEXEC = "POPDIST_EMU_MPIEXEC"  # like --mpiexec: the system MPI's mpiexec
ENV_LIBMPI = "POPDIST_EMU_LIBMPI"  # like --libmpi: that MPI's libmpi.so
ENV_MPI4PY_LIBMPI = "MPI4PY_LIBMPI"  # mpi4py's own variable: the libmpi it loads

# -- gcl's knobs that the launcher sets and gcl reads (gcl's other knobs, such as
# GCL_EMU_PIECE_BYTES, are read where they are used) -------------------------------------------
ENV_GCL_TIMEOUT = "GCL_EMU_TIMEOUT"  # --collective-timeout, seconds
DEFAULT_GCL_TIMEOUT_S = 120.0  # the collective timeout when ENV_GCL_TIMEOUT is unset
ENV_GCL_ON_FAILURE = "GCL_EMU_ON_FAILURE"  # "exit": end a failing process without MPI_Finalize
ENV_GCL_WAITING_FILE = "GCL_EMU_WAITING_FILE"  # where gcl records a wait of over a second

# -- JAX's persistent compilation cache (read by JAX itself at import) --------------------------
ENV_JAX_CACHE_DIR = "JAX_COMPILATION_CACHE_DIR"
ENV_JAX_CACHE_MIN_COMPILE_SECONDS = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
ENV_JAX_CACHE_MIN_ENTRY_BYTES = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"


def _read_int(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise LayoutError(f"{name}={value!r} is not an integer.") from None


@dataclasses.dataclass(frozen=True)
class InstanceEnvironment:
    """What one instance of a job sees: its layout, its index and the launcher's settings.

    Outside PopRun (no ``POPDIST_*`` variables) it is PopDist's default view: one instance
    driving one replica, ``popdist_set`` False.

    Attributes:
        layout: replicas, instances, IPUs per replica and hosts of the job.
        instance: this instance's global index in ``[0, layout.num_instances)``.
        popdist_set: whether PopRun's variables were present (PopDist's ``isPopdistEnvSet``).
        local_instance_index: the instance's index among those of its host (PopRun's value;
            0 when unset).
        system: the simulated system's name (``--system``); empty = the smallest Mk2 POD
            that holds the job.
        report_dir: where instance 0 writes ``summary.json`` and ``trace.json``; empty = none.
        offline: ``--offline-mode``: compile only, run nothing.
        job_dir: the launcher's job directory; empty outside the launcher.
        progress: whether the launcher's terminal wants instance 0's progress bar.
        command: the ``poprun-emu`` command line that started the job (shell-quoted), for
            the reports; empty outside the launcher.
        scaling_request: the request file of ``poprun-emu-scaling`` (every point of a sweep
            to evaluate from this run's step); empty when no sweep asked.
        calibration_family: ``--calibration-family``: the calibrated family whose
            whole-program parameters the simulation uses; empty = the structural ones.
        calibration_file: the calibration file ``--calibrate-from``'s refit wrote, in place
            of the packaged ``hardware/calibration.json``; empty = the packaged one.
    """

    layout: ReplicaLayout = dataclasses.field(default_factory=ReplicaLayout)
    instance: int = 0
    popdist_set: bool = False
    local_instance_index: int = 0
    system: str = ""
    report_dir: str = ""
    offline: bool = False
    job_dir: str = ""
    progress: bool = False
    command: str = ""
    scaling_request: str = ""
    calibration_family: str = ""
    calibration_file: str = ""

    @property
    def replica_offset(self) -> int:
        """Global index of this instance's first replica."""
        return self.layout.replica_offset(self.instance)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> InstanceEnvironment:
        """Reads an instance's view once from ``environ`` (default ``os.environ``).

        Raises:
            hardware.LayoutError: a variable that is not an integer, or a layout PopRun
                would refuse.
        """
        environ = os.environ if environ is None else environ
        local = _read_int(environ, ENV_NUM_LOCAL_REPLICAS, 1)
        if local < 1:
            raise LayoutError(f"{ENV_NUM_LOCAL_REPLICAS}={local} must be at least 1.")
        total = _read_int(environ, ENV_NUM_TOTAL_REPLICAS, local)
        offset = _read_int(environ, ENV_REPLICA_INDEX_OFFSET, 0)
        hosts = tuple(h for h in environ.get(ENV_HOSTS, "").split(",") if h)
        layout = ReplicaLayout(
            num_replicas=total,
            num_instances=max(total // local, 1),
            ipus_per_replica=_read_int(environ, ENV_NUM_IPUS_PER_REPLICA, 1),
            hosts=hosts or ("localhost",),
        )
        instance = _read_int(environ, ENV_INSTANCE_INDEX, offset // local)
        if not 0 <= instance < layout.num_instances:
            raise LayoutError(f"instance {instance} is outside [0, {layout.num_instances}).")
        return cls(
            layout=layout,
            instance=instance,
            popdist_set=ENV_NUM_TOTAL_REPLICAS in environ and ENV_NUM_LOCAL_REPLICAS in environ,
            local_instance_index=_read_int(environ, ENV_LOCAL_INSTANCE_INDEX, 0),
            system=environ.get(ENV_SYSTEM, ""),
            report_dir=environ.get(ENV_REPORT_DIR, ""),
            offline=environ.get(ENV_OFFLINE, "") == "1",
            job_dir=environ.get(ENV_JOB_DIR, ""),
            progress=environ.get(ENV_PROGRESS, "") == "1",
            command=environ.get(ENV_COMMAND, ""),
            scaling_request=environ.get(ENV_SCALING_REQUEST, ""),
            calibration_family=environ.get(ENV_CALIBRATION_FAMILY, ""),
            calibration_file=environ.get(ENV_CALIBRATION_FILE, ""),
        )

    def to_environ(self) -> dict[str, str]:
        """The variables that make :meth:`from_environ` read this view back: PopRun's
        ``POPDIST_*`` and the emulator's ``POPDIST_EMU_*`` (the scaling request and the
        calibration file only when there is one: the launcher passes on the ones
        ``poprun-emu-scaling`` or ``--calibrate-from`` set in its environment)."""
        layout, i = self.layout, self.instance
        request = {ENV_SCALING_REQUEST: self.scaling_request} if self.scaling_request else {}
        if self.calibration_file:
            request[ENV_CALIBRATION_FILE] = self.calibration_file
        return request | {
            ENV_NUM_TOTAL_REPLICAS: str(layout.num_replicas),
            ENV_NUM_LOCAL_REPLICAS: str(layout.num_local_replicas),
            ENV_NUM_IPUS_PER_REPLICA: str(layout.ipus_per_replica),
            ENV_REPLICA_INDEX_OFFSET: str(layout.replica_offset(i)),
            ENV_LOCAL_INSTANCE_INDEX: str(self.local_instance_index),
            ENV_UNIFORM_REPLICAS_PER_INSTANCE: "1",
            ENV_INSTANCE_INDEX: str(i),
            ENV_HOSTS: ",".join(layout.hosts),
            ENV_SYSTEM: self.system,
            ENV_REPORT_DIR: self.report_dir,
            ENV_OFFLINE: "1" if self.offline else "0",
            ENV_JOB_DIR: self.job_dir,
            ENV_PROGRESS: "1" if self.progress else "0",
            ENV_COMMAND: self.command,
            ENV_CALIBRATION_FAMILY: self.calibration_family,
        }


def pid_path(job_dir: str, instance: int) -> str:
    """Where the launcher's bootstrap of ``instance`` records its pid and process group (in
    the job directory, which the instances also read)."""
    return os.path.join(job_dir, f"instance-{instance}.pid")


# "<pid> <process group>\n": two numbers of at most 10 digits each (pid_max is at most 2**22).
_PID_FILE_BYTES = 64


def read_pid_file(job_dir: str, instance: int) -> tuple[int, int] | None:
    """``(pid, process group)`` that the bootstrap of ``instance`` recorded (:func:`pid_path`),
    or None while there is no whole record: no file yet (or no job directory), or one that is
    not two numbers in ASCII digits (a foreign file, a FIFO, a device: never waited on).

    The one reader of the bootstraps' record: the launcher's watchdog (their process groups),
    the program of each instance (its bootstrap's pid) and the sweep of stale job directories.
    """
    try:
        words = read_bounded(pid_path(job_dir, instance), _PID_FILE_BYTES).split()
    except (OSError, FileTooLargeError):
        return None
    if len(words) != 2 or not all(word.isdigit() for word in words):  # bytes: ASCII digits
        return None
    return int(words[0]), int(words[1])


def pid_file_instances(job_dir: str) -> list[int]:
    """The instances whose bootstrap recorded itself (a pid file) in ``job_dir``, sorted."""
    prefix, suffix = pid_path(job_dir, 0).rsplit("0", 1)
    found = []
    for path in glob.glob(glob.escape(prefix) + "*" + glob.escape(suffix)):
        middle = path[len(prefix) : len(path) - len(suffix)]
        if middle.isascii() and middle.isdigit():
            found.append(int(middle))
    return sorted(found)


def status_path(job_dir: str, instance: int) -> str:
    """Where the bootstrap of ``instance`` records its program's exit status."""
    return os.path.join(job_dir, f"instance-{instance}.status")


def waiting_path(job_dir: str, instance: int) -> str:
    """Where gcl in ``instance`` records that it has waited over a second in a collective
    (removed when the wait ends; left when it times out)."""
    return os.path.join(job_dir, f"instance-{instance}.waiting")


def leaving_path(job_dir: str, instance: int) -> str:
    """Where the program of ``instance`` records the non-zero status it is ending with,
    before its exit handlers (and MPI's finalisation) run."""
    return os.path.join(job_dir, f"instance-{instance}.leaving")


def orphaned_path(job_dir: str, instance: int) -> str:
    """Where the program of ``instance`` records the moment its bootstrap died under it (the
    bootstrap was killed; its program runs on, orphaned)."""
    return os.path.join(job_dir, f"instance-{instance}.orphaned")


def layout_environment(layout: ReplicaLayout, instance: int) -> dict[str, str]:
    """PopRun's view of ``instance`` of ``layout`` as variables (no emulator settings).

    What a test or a tool needs to make a process look like an instance of a job.
    """
    view = InstanceEnvironment(
        layout=layout,
        instance=instance,
        popdist_set=True,
        local_instance_index=layout.local_instance_index(instance),
    )
    environ = view.to_environ()
    return {k: environ[k] for k in (*POPRUN_VARIABLES, ENV_INSTANCE_INDEX, ENV_HOSTS)}


@dataclasses.dataclass(frozen=True)
class JobConfig:
    """What the launcher decided for the whole job; every bootstrap receives it as JSON.

    Attributes:
        layout: the validated layout.
        job_dir: the launcher's job directory (pid and status files for the watchdog).
        exports: ``(name, value)`` pairs exported to every instance (``-x NAME=VALUE``).
        only_output_from: ``--only-output-from-instance``; None = every instance (tagged
            when several print).
        system: ``--system``; empty = the smallest Mk2 POD that holds the job.
        report_dir: ``--report-dir``; empty = no report files.
        offline: ``--offline-mode``.
        launcher_pid: the launcher's pid, so an instance ends when its launcher dies.
        launcher_pid_space: the launcher's process-id space (``launch._job.pid_space``):
            only a bootstrap in the same space can watch ``launcher_pid``.
        instance: the instance index a bootstrap takes without an MPI rank (offline mode's
            representative process); None = the MPI rank.
        executable_cache_path: JAX's persistent compilation cache directory (PopRun's
            ``--executable-cache-path``); empty = no persistent cache.
        progress: whether instance 0 draws a progress bar (the launcher's stderr is a
            terminal).
        output_dir: Open MPI's ``--output-filename DIR``: every instance's stdout and stderr
            are also written under DIR in Open MPI's layout; empty = no log files.
        command: the ``poprun-emu`` command line, shell-quoted, for the reports.
        tag_output: ``--tag-output`` given: tag every line, even where one instance prints.
        calibration_family: ``--calibration-family``; empty = the structural parameters.
    """

    layout: ReplicaLayout
    job_dir: str
    exports: tuple[tuple[str, str], ...] = ()
    only_output_from: int | None = None
    system: str = ""
    report_dir: str = ""
    offline: bool = False
    launcher_pid: int | None = None
    launcher_pid_space: str = ""
    instance: int | None = None
    executable_cache_path: str = ""
    progress: bool = False
    output_dir: str = ""
    command: str = ""
    tag_output: bool = False
    calibration_family: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "exports", tuple((str(k), str(v)) for k, v in self.exports))

    def to_json(self) -> str:
        """The configuration as one JSON object (for :data:`ENV_BOOTSTRAP`)."""
        data = dataclasses.asdict(self)
        data["layout"]["hosts"] = list(self.layout.hosts)
        data["exports"] = [list(kv) for kv in self.exports]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> JobConfig:
        """Reads back what :meth:`to_json` wrote."""
        data = json.loads(text)
        layout = data.pop("layout")
        layout["hosts"] = tuple(layout["hosts"])
        data["exports"] = tuple(tuple(kv) for kv in data.get("exports", ()))
        return cls(layout=ReplicaLayout(**layout), **data)

    def instance_view(self, instance: int) -> InstanceEnvironment:
        """What ``instance`` of this job sees."""
        return InstanceEnvironment(
            layout=self.layout,
            instance=instance,
            popdist_set=True,
            local_instance_index=self.layout.local_instance_index(instance),
            system=self.system or "",
            report_dir=self.report_dir or "",
            offline=self.offline,
            job_dir=self.job_dir,
            progress=self.progress and instance == 0,
            command=self.command,
            calibration_family=self.calibration_family,
        )

    def instance_variables(self, instance: int) -> dict[str, str]:
        """Every variable the launcher sets for ``instance``: the exports, PopRun's and the
        emulator's variables, and JAX's persistent cache when one is configured."""
        env = dict(self.exports)
        env.update(self.instance_view(instance).to_environ())
        # A failing instance exits without MPI_Finalize, so its bootstrap records the code
        # and the launcher names it (MPI_Abort would let mpiexec kill every bootstrap first).
        env[ENV_GCL_ON_FAILURE] = "exit"
        if self.job_dir:
            env[ENV_GCL_WAITING_FILE] = waiting_path(self.job_dir, instance)
        if self.executable_cache_path:
            env[ENV_JAX_CACHE_DIR] = self.executable_cache_path
            # Cache every program: the emulator's steps compile in well under JAX's default
            # threshold of one second, yet they are what a warm start should skip.
            env.setdefault(ENV_JAX_CACHE_MIN_COMPILE_SECONDS, "0")
            env.setdefault(ENV_JAX_CACHE_MIN_ENTRY_BYTES, "0")
        return env


def read_job_config(environ: Mapping[str, str] | None = None) -> JobConfig | None:
    """The job configuration a bootstrap was started with, or None outside the launcher."""
    environ = os.environ if environ is None else environ
    text = environ.get(ENV_BOOTSTRAP)
    return None if text is None else JobConfig.from_json(text)


def offline_mode(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the launcher started this process under ``--offline-mode``."""
    environ = os.environ if environ is None else environ
    return environ.get(ENV_OFFLINE, "") == "1"
