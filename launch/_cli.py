"""``poprun-emu``: PopRun's command line -> validated layout -> one MPI rank per instance.

Everything a user can get wrong is refused before any process starts, in one line on stderr
naming the value and the fix, with exit code 2. This module imports neither JAX nor mpi4py, so
a refusal takes a few tens of milliseconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence

from contract import (
    DEFAULT_GCL_TIMEOUT_S,
    ENV_BOOTSTRAP,
    ENV_GCL_TIMEOUT,
    ENV_MPI4PY_LIBMPI,
    ENV_MPIEXEC,
    MIN_TIMEOUT_S,
    JobConfig,
)
from hardware import (
    LayoutError,
    ReplicaLayout,
    SystemSelectionError,
    UnknownFamilyError,
    check_family,
    select_system,
)
from launch import _calibrate_from as calibrate_from
from launch._cache import executable_cache_dir
from launch._errors import InterruptError, UsageError
from launch._job import instance_environment, pid_space
from launch._mpi import (
    Flavour,
    adapt_mpi_args,
    check_with_mpiexec,
    find_mpiexec,
    mpi_flavour,
    mpiexec_command,
)
from launch._options import OPTIONS, LaunchOptions, parse_command_line
from launch._output import log_problem
from launch._placement import find_libmpi, hosts_argument, offline_capacity
from launch._preflight import (
    check_exec_size,
    check_memory,
    check_output_dir,
    collective_timeout,
    compute_device_exports,
)
from launch._program import program_command
from launch._stale import claim, sweep_stale
from launch._subnet import host_subnet_arguments
from launch._topology import format_topology
from launch._version import launcher_version
from launch._watchdog import run_job


def help_text() -> str:
    """``--help``: PopRun's usage line and every option, the emulator's differences marked."""
    return help_parser().format_help()


def help_parser() -> argparse.ArgumentParser:
    """The parser ``--help`` prints, built from :data:`launch._options.OPTIONS`; the
    documentation site renders its options table from it. The command line itself is read
    by ``parse_command_line``, which keeps PopRun's value forms."""
    parser = argparse.ArgumentParser(
        prog="poprun-emu",
        usage="poprun-emu [options] program [args]",
        add_help=False,
        description=(
            "Emulates Graphcore PopRun on this machine: starts --num-instances MPI processes as "
            "host instances, each with PopRun's POPDIST_* environment, pinned to one CPU. A "
            "program ending in .py runs with this Python; anything else is run as an "
            "executable (python3 train.py). Host names (-H) are simulated (every instance runs "
            "here) unless --real-hosts runs the instances on them through MPI. V-IPU and "
            "partition options are accepted and have no effect. MPI options written for Open "
            "MPI's mpirun are translated, passed to the MPI in use, or dropped with a note."
        ),
    )
    for spec in OPTIONS:
        if spec.kind in ("count", "flag"):
            parser.add_argument(*spec.flags, dest=spec.dest, help=spec.help, action="store_true")
        else:
            parser.add_argument(
                *spec.flags, dest=spec.dest, help=spec.help, metavar=spec.metavar or "VALUE"
            )
    return parser


def _version_text(style: str) -> str:
    version = launcher_version()
    if style == "text":
        return f"poprun-emu {version}"
    try:
        mpiexec = find_mpiexec(os.environ)
    except UsageError:
        mpiexec = ""
    details = {
        "poprun-emu": version,
        "python": sys.version.split()[0],
        "mpiexec": mpiexec,
        "mpi": mpi_flavour(mpiexec) if mpiexec else "",
    }
    if style == "full-json":
        return json.dumps(details)
    return "\n".join(f"{k}: {v}" for k, v in details.items())


def validate(options: LaunchOptions) -> tuple[ReplicaLayout, list[str]]:
    """The job's layout and the command each instance runs, or a UsageError.

    Raises:
        UsageError: a layout PopRun refuses, an unknown ``--system`` or one with fewer IPUs
            than the job needs, an unknown ``--calibration-family``, a bad ``--calibrate-from``
            file, a bad program, a malformed
            ``-x`` in the MPI arguments, or an instance index for
            ``--only-output-from-instance`` outside ``[0, num_instances)``.
    """
    try:
        layout = ReplicaLayout(
            num_replicas=options.num_replicas,
            num_instances=options.num_instances,
            ipus_per_replica=options.ipus_per_replica,
            hosts=options.hosts,
        )
    except LayoutError as error:
        raise UsageError(str(error)) from None
    try:
        # Refused here, before any instance starts, rather than by every instance later.
        select_system(options.system, layout.num_ipus)
    except SystemSelectionError as error:
        raise UsageError(str(error)) from None
    try:
        if options.calibration_family:  # an unknown family, before any instance starts
            check_family(options.calibration_family)
    except UnknownFamilyError as error:
        raise UsageError(str(error)) from None
    only = options.only_output_from_instance
    if only is not None and not 0 <= only < layout.num_instances:
        raise UsageError(
            f"--only-output-from-instance {only} is outside [0, {layout.num_instances}): pick "
            f"an instance index below --num-instances {layout.num_instances}."
        )
    for words in (options.mpi_global_args, options.mpi_local_args):
        # -x syntax and --output-filename's directory, checked before anything is printed
        check_output_dir("--output-filename", adapt_mpi_args(words, "other", {}).output_dir)
    for words in (options.mpi_global_args, options.mpi_local_args):
        logs = adapt_mpi_args(words, "other", {}).output_dir
        problem = log_problem(logs, layout.num_instances) if logs else None
        if problem:
            raise UsageError(
                f"--output-filename {logs!r}: {problem}: logs are never written through a "
                f"symlink; remove it or pick another directory."
            )
    command = program_command(options.program, python=sys.executable)
    # Fail early: outputs, the timeout, the device and the memory, before anything starts.
    check_output_dir("--report-dir", options.report_dir)
    check_output_dir("--executable-cache-path", options.executable_cache_path)
    collective_timeout(options.collective_timeout)
    compute_device_exports(options.compute_device)
    if not options.offline_mode:
        check_memory(layout.num_instances)
    return layout, command


def _log(message: str) -> None:
    print(f"poprun-emu: {message}", file=sys.stderr, flush=True)


def _offline_representative(options: LaunchOptions, layout: ReplicaLayout) -> bool:
    """Whether one representative instance stands for all of an offline job's instances."""
    if not options.offline_mode or layout.num_instances == 1:
        return False
    if options.offline_representative:
        _log(
            f"--offline-representative: instance 0 stands for all {layout.num_instances} "
            f"instances (they are symmetric)"
        )
        return True
    capacity = offline_capacity()
    if layout.num_instances > capacity:
        _log(
            f"--offline-mode: {layout.num_instances} instances would not fit on this machine "
            f"(at most {capacity} here, by its CPUs and free memory); instance 0 stands for "
            f"all of them (they are symmetric)"
        )
        return True
    return False


def _system_mpi(options: LaunchOptions, mpiexec: str) -> str:
    """The libmpi to export as MPI4PY_LIBMPI when a system MPI was named, else ""."""
    if not (options.mpiexec or os.environ.get(ENV_MPIEXEC) or options.libmpi):
        return ""
    return find_libmpi(mpiexec, options.libmpi, os.environ)


def _openmpi_forwarded() -> list[str]:
    """``-x NAME`` words so Open MPI gives remote instances the launcher's environment, as
    Hydra does by default (``-genvall``); Open MPI's own variables are its to set."""
    words = ["-x", ENV_BOOTSTRAP]
    for name in sorted(os.environ):
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and not name.startswith(
            ("OMPI_", "PMIX_", "PRTE_", "OPAL_", ENV_BOOTSTRAP)
        ):
            words += ["-x", name]
    return words


def launch(
    options: LaunchOptions, layout: ReplicaLayout, program: list[str], command_line: str = ""
) -> int:
    """Starts the instances (offline, perhaps instance 0 alone) and watches them to the end.

    ``command_line`` is the launcher's own command line, passed on for the reports.
    """
    cache = executable_cache_dir(options.executable_cache_path)  # refused before any start
    no_effect = [f for f in options.no_effect if f != "--host-subnet"]
    if no_effect:
        _log(
            f"{', '.join(no_effect)}: no effect in the emulator (there is no V-IPU "
            f"server; the IPUs are simulated)"
        )
    if options.host_subnet and not options.real_hosts:
        _log("--host-subnet: no effect without --real-hosts (every instance runs here)")
    representative = _offline_representative(options, layout)
    if options.print_topology:
        print(format_topology(layout, simulated=not options.real_hosts), end="", flush=True)
    if options.verbosity >= 1:
        _log(
            f"layout: {layout.num_replicas} replicas, {layout.num_instances} instances x "
            f"{layout.num_local_replicas} local replicas, {layout.ipus_per_replica} IPUs per "
            f"replica ({layout.num_ipus} IPUs), hosts {','.join(layout.hosts)}"
            + (" (real)" if options.real_hosts else " (simulated)")
            + (", offline (instance 0 only)" if representative else "")
            + (", offline" if options.offline_mode and not representative else "")
        )
    single = representative or (options.offline_mode and layout.num_instances == 1)
    flavour: Flavour = "none"
    mpiexec = libmpi = ""
    if not single:
        mpiexec = find_mpiexec(os.environ, options.mpiexec)
        flavour = mpi_flavour(mpiexec)
        libmpi = _system_mpi(options, mpiexec)
        if options.verbosity >= 1:
            _log(
                f"MPI: {flavour} {mpiexec}; libmpi: "
                + (f"{libmpi} (MPI4PY_LIBMPI)" if libmpi else "mpi4py's default")
            )
    global_args = adapt_mpi_args(options.mpi_global_args, flavour, os.environ)
    local_args = adapt_mpi_args(options.mpi_local_args, flavour, os.environ)
    if global_args.unknown + local_args.unknown:
        check_with_mpiexec(mpiexec, flavour, global_args.args + local_args.args)
    dropped = global_args.dropped + local_args.dropped
    if dropped:
        _log(f"MPI arguments not honoured ({flavour}): {'; '.join(dropped)}")
    if options.verbosity >= 1 and global_args.translated + local_args.translated:
        translated = global_args.translated + local_args.translated
        _log(f"MPI arguments done by poprun-emu itself: {', '.join(translated)}")
    output_dir = global_args.output_dir or local_args.output_dir

    # The device first, so that a user's -x JAX_PLATFORMS=... still wins.
    exports = compute_device_exports(options.compute_device)
    timeout = collective_timeout(options.collective_timeout)
    if timeout is not None:
        exports += ((ENV_GCL_TIMEOUT, f"{timeout:g}"),)
    exports += global_args.exports + local_args.exports
    leave_timeout = _leave_timeout(exports)
    if libmpi and ENV_MPI4PY_LIBMPI not in dict(exports):
        exports += ((ENV_MPI4PY_LIBMPI, libmpi),)
    stale = sweep_stale()
    if stale:
        _log(
            f"removed {len(stale)} job director{'y' if len(stale) == 1 else 'ies'} of "
            f"launchers no longer running: {', '.join(stale)}"
        )
    # Real hosts see the job directory only where the working directory is shared.
    job_dir = tempfile.mkdtemp(
        prefix=".poprun-emu-" if options.real_hosts else "poprun-emu-",
        dir=os.getcwd() if options.real_hosts else None,
    )
    try:
        claim(job_dir)
        config = JobConfig(
            layout=layout,
            job_dir=job_dir,
            exports=exports,
            only_output_from=options.only_output_from_instance,
            system=options.system or "",
            report_dir=options.report_dir or "",
            offline=options.offline_mode,
            calibration_family=options.calibration_family,
            launcher_pid=os.getpid(),
            launcher_pid_space=pid_space(),
            instance=0 if single else None,
            executable_cache_path=cache,
            progress=sys.stderr.isatty(),
            output_dir=output_dir or "",
            command=command_line,
            tag_output=global_args.tag_output or local_args.tag_output,
        )
        bootstrap = [sys.executable, "-m", "launch._bootstrap", "--", *program]
        if single:
            command, instances = bootstrap, [0]
        else:
            extra: list[str] = []
            if options.real_hosts:
                extra = hosts_argument(
                    flavour, layout.hosts, layout.num_instances // len(layout.hosts)
                )
                if flavour == "openmpi":
                    extra += _openmpi_forwarded()
                if options.host_subnet:
                    extra += host_subnet_arguments(flavour, options.host_subnet)
            command = mpiexec_command(
                mpiexec,
                flavour,
                num_instances=layout.num_instances,
                global_args=(*extra, *global_args.args),
                local_args=local_args.args,
                bootstrap=bootstrap,
                is_root=os.geteuid() == 0,
            )
            instances = list(range(layout.num_instances))
        if options.verbosity >= 2:
            _log(f"command: {shlex.join(command)}")
            for i in instances:
                env = instance_environment(config, i, os.environ)
                exported = {k: v for k, v in env.items() if os.environ.get(k) != v}
                _log(f"instance {i} exports: {' '.join(f'{k}={v}' for k, v in exported.items())}")
        env = {**os.environ, ENV_BOOTSTRAP: config.to_json()}
        check_exec_size(command, env)  # refused here, not as a traceback from exec
        return run_job(
            command,
            env=env,
            job_dir=job_dir,
            instances=instances,
            # Offline instances call no collective, so none waits for another: each may
            # compile for as long as it takes.
            leave_timeout=math.inf if options.offline_mode else leave_timeout,
            mpi_banner=options.verbosity >= 1,
            shown_alone=_shown_alone(options, layout, single),
            host_of=([layout.host_of_instance(i) for i in instances] if options.real_hosts else ()),
        )
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def _shown_alone(options: LaunchOptions, layout: ReplicaLayout, single: bool) -> frozenset[int]:
    """Instances whose output is the only output on the terminal."""
    only = options.only_output_from_instance
    if only is not None:
        return frozenset({only})
    return frozenset({0}) if single or layout.num_instances == 1 else frozenset()


def _leave_timeout(exports: Sequence[tuple[str, str]]) -> float:
    """The collective timeout the instances will see (a ``-x GCL_EMU_TIMEOUT=S`` after
    ``--collective-timeout`` wins, as for them): how long the others may run on once one
    instance has returned."""
    text = dict(exports).get(ENV_GCL_TIMEOUT)
    if text is None:
        return DEFAULT_GCL_TIMEOUT_S
    try:
        seconds = collective_timeout(text)
    except UsageError:
        seconds = None
    if seconds is None:
        raise UsageError(
            f"-x {ENV_GCL_TIMEOUT}={text!r} is not a number of seconds in ASCII digits "
            f"(at least {MIN_TIMEOUT_S:g}): use --collective-timeout SECONDS instead."
        )
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    """The ``poprun-emu`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        options = parse_command_line(argv)
        if options.help:
            print(help_text(), end="")
            return 0
        if options.version:
            print(_version_text(options.version_format))
            return 0
        layout, program = validate(options)
        if not options.calibrate_from:
            return launch(options, layout, program, shlex.join(["poprun-emu", *argv]))
        # The refit refuses a bad file in one line before anything runs; the job reads its file.
        with calibrate_from.refitted(options) as env:
            os.environ.update(env)
            return launch(options, layout, program, shlex.join(["poprun-emu", *argv]))
    except UsageError as error:
        print(f"poprun-emu: error: {error}", file=sys.stderr)
        return 2
    except InterruptError as stop:
        print(
            f"poprun-emu: interrupted by {signal.Signals(stop.signum).name} during the "
            f"--calibrate-from refit; ended it, nothing was launched",
            file=sys.stderr,
        )
        return 128 + stop.signum
