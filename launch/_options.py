"""PopRun's command line: option names, defaults and PopRun's boolean spellings.

``poprun-emu [options] program [args]``: options end at the first word that is not an option
or an option's value (or at ``--``); everything from there on belongs to the program, so a
program's own ``--num-replicas`` is never read by the launcher.

References:
    PopRun/PopDist User Guide, "Overview" (the option table,
    https://docs.graphcore.ai/projects/poprun-user-guide/en/latest/overview.html).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

from launch._config import CONFIG_DESTS, export_config, read_config, refuse_repeats
from launch._errors import UsageError
from launch._hosts import parse_hosts, short
from launch._values import FALSE, TRUE, parse_bool, parse_int, unknown_option

Kind = Literal["int", "str", "bool", "count", "flag", "choice"]


class OptionSpec(NamedTuple):
    """One option: its spellings, how its value is read, and what it does here."""

    flags: tuple[str, ...]
    kind: Kind
    dest: str
    help: str
    metavar: str = ""
    no_effect: bool = False  # accepted so real scripts run; reported once as ineffective
    choices: tuple[str, ...] = ()


# The options of PopRun (the PopRun/PopDist User Guide's option table) and the emulator's own.
OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(("-h", "--help"), "flag", "help", "Show this help and exit."),
    OptionSpec(("--version",), "flag", "version", "Show the version and exit."),
    OptionSpec(
        ("--version-format",),
        "choice",
        "version_format",
        "Format of --version: text (default), full-text or full-json.",
        "FORMAT",
        choices=("text", "full-text", "full-json"),
    ),
    OptionSpec(("--num-replicas",), "int", "num_replicas", "Total replicas (1).", "N"),
    OptionSpec(
        ("--num-instances",),
        "int",
        "num_instances",
        "Host instances (MPI processes); replicas are divided evenly among them (1).",
        "N",
    ),
    OptionSpec(
        ("--ipus-per-replica",),
        "int",
        "ipus_per_replica",
        "IPUs per replica: 1, 2, 4, 8 or 16 (1).",
        "N",
    ),
    OptionSpec(
        ("-H", "--host"),
        "str",
        "host",
        "Hosts, e.g. host0,host1 or host[0-2,4]; instances are divided evenly among them. "
        "Simulated by default: every instance runs on this machine and the names set "
        "POPDIST_LOCAL_INSTANCE_INDEX and show in --print-topology; with --real-hosts the "
        "instances run on these hosts.",
        "HOSTS",
    ),
    OptionSpec(
        ("--only-output-from-instance",),
        "int",
        "only_output_from_instance",
        "Show only this instance's output, untagged; the others are silenced (this can hide "
        "their errors; the launcher still names a failing instance).",
        "I",
    ),
    OptionSpec(
        ("--mpi-global-args",),
        "str",
        "mpi_global_args",
        "mpirun arguments (one string; repeatable). Translated whatever the MPI: "
        "--tag-output, --output-filename DIR (Open MPI's per-instance log layout), -x "
        "NAME[=VALUE], --bind-to, --allow-run-as-root, --oversubscribe; other options go to "
        "the MPI in use, Open MPI-only ones are dropped with a note under MPICH, -np/-H/"
        "--hostfile are refused.",
        "ARGS",
    ),
    OptionSpec(
        ("--mpi-local-args",),
        "str",
        "mpi_local_args",
        "Per-instance mpirun arguments (one string): -x NAME / -x NAME=VALUE export "
        "variables to every instance; other words go to mpiexec before the program.",
        "ARGS",
    ),
    OptionSpec(
        ("--print-topology",),
        "bool",
        "print_topology",
        "Print a table of hosts, instances, replicas and IPUs before launching.",
        "yes|no",
    ),
    OptionSpec(
        ("--numa-aware",),
        "bool",
        "numa_aware",
        "Accepted; instances are always pinned round-robin to one CPU each.",
        "yes|no",
    ),
    OptionSpec(
        ("--offline-mode",),
        "bool",
        "offline_mode",
        "Compile only, attach to no IPUs: starts every instance PopRun would (each compiles, "
        "none runs; exports POPDIST_EMU_OFFLINE=1); one representative instance stands for "
        "them all where that many would not fit on this machine.",
        "yes|no",
    ),
    OptionSpec(
        ("--system",),
        "str",
        "system",
        "Emulator: simulated system name (exported as POPDIST_EMU_SYSTEM); default: the "
        "smallest Mk2 POD that holds the job.",
        "NAME",
    ),
    OptionSpec(
        ("--calibration-family",),
        "str",
        "calibration_family",
        "Emulator: a calibrated family's whole-program parameters (e.g. BERT, ResNet-50) in "
        "place of the terms the program's structure weighs (POPDIST_EMU_CALIBRATION_FAMILY).",
        "NAME",
    ),
    OptionSpec(
        ("--calibrate-from",),
        "str",
        "calibrate_from",
        "Emulator: JSON lines of measured runs (replicas, samples_per_second, ...); the terms "
        "they constrain are refitted before the job runs, and printed.",
        "FILE",
    ),
    OptionSpec(
        ("--report-dir",),
        "str",
        "report_dir",
        "Emulator: directory for reports (exported as POPDIST_EMU_REPORT_DIR).",
        "DIR",
    ),
    OptionSpec(
        ("--collective-timeout",),
        "str",
        "collective_timeout",
        "Emulator: seconds a collective waits for the other instances before the job is "
        "ended, in ASCII digits from 1 to 604800 (exported as GCL_EMU_TIMEOUT; default 120).",
        "SECONDS",
    ),
    OptionSpec(
        ("--compute-device",),
        "choice",
        "compute_device",
        "Emulator: where the replicas compute: cpu (default, the same bits on every machine) "
        "or gpu (shared by all instances, no preallocation; other bits than the CPU's).",
        "cpu|gpu",
        choices=("cpu", "gpu"),
    ),
    OptionSpec(
        ("-v", "--verbose"),
        "count",
        "verbosity",
        "-v prints the layout and the MPI in use; -vv (or --vv) also the mpiexec command and "
        "the exported variables.",
    ),
    OptionSpec(("--vv",), "count", "verbosity", "Very verbose: the same as -vv."),
    OptionSpec(
        ("--import-config",),
        "str",
        "import_config",
        "Read options from this file (JSON written by --export-config); options given on "
        "the command line override it.",
        "FILE",
    ),
    OptionSpec(
        ("--export-config",), "str", "export_config", "Write the options given as JSON.", "FILE"
    ),
    OptionSpec(
        ("--overwrite-config",),
        "bool",
        "overwrite_config",
        "Allow --export-config to replace an existing file (0).",
        "yes|no",
    ),
    OptionSpec(
        ("--real-hosts",),
        "bool",
        "real_hosts",
        "Emulator: run the instances on the hosts -H names, through the MPI in use (its host "
        "list and ssh launcher) instead of simulating the host names here.",
        "yes|no",
    ),
    OptionSpec(
        ("--offline-representative",),
        "bool",
        "offline_representative",
        "Emulator: with --offline-mode, start one representative instance (instance 0 of the "
        "full layout) instead of every instance.",
        "yes|no",
    ),
    OptionSpec(
        ("--mpiexec",),
        "str",
        "mpiexec",
        "Emulator: the mpiexec of a system MPI to use instead of the embedded MPICH wheel's "
        "(also POPDIST_EMU_MPIEXEC).",
        "PATH",
    ),
    OptionSpec(
        ("--libmpi",),
        "str",
        "libmpi",
        "Emulator: that MPI's libmpi.so for mpi4py (exported as MPI4PY_LIBMPI; also "
        "POPDIST_EMU_LIBMPI); default: found beside --mpiexec.",
        "PATH",
    ),
    # V-IPU and partition options: there is no V-IPU server here, the IPUs are simulated.
    OptionSpec(("--vipu-server-host",), "str", "vipu_server_host", "No effect.", "HOST", True),
    OptionSpec(("--vipu-server-port",), "int", "vipu_server_port", "No effect.", "PORT", True),
    OptionSpec(("--vipu-server-timeout",), "int", "vipu_server_timeout", "No effect.", "S", True),
    OptionSpec(("--vipu-partition",), "str", "vipu_partition", "No effect.", "NAME", True),
    OptionSpec(
        ("--vipu-partition-attempts",), "int", "vipu_partition_attempts", "No effect.", "N", True
    ),
    OptionSpec(("--vipu-cluster",), "str", "vipu_cluster", "No effect.", "NAME", True),
    OptionSpec(("--vipu-allocation",), "str", "vipu_allocation", "No effect.", "NAME", True),
    OptionSpec(("--update-partition",), "bool", "update_partition", "No effect.", "yes|no", True),
    OptionSpec(("--reset-partition",), "bool", "reset_partition", "No effect.", "yes|no", True),
    OptionSpec(("--remove-partition",), "bool", "remove_partition", "No effect.", "yes|no", True),
    OptionSpec(("--num-ilds",), "int", "num_ilds", "No effect.", "N", True),
    OptionSpec(("--sync-type",), "str", "sync_type", "No effect (partition sync type).", "T", True),
    OptionSpec(
        ("--host-subnet",),
        "str",
        "host_subnet",
        "With --real-hosts: the subnet of the hosts' MPI traffic and daemons (Hydra's -iface "
        "of the interface here in it; Open MPI's oob_tcp_if_include and btl_tcp_if_include). "
        "No effect otherwise.",
        "SUBNET",
        True,
    ),
    OptionSpec(
        ("--process-placement",),
        "str",
        "process_placement",
        "No effect: instances are always pinned round-robin to one CPU each "
        "(PopRun's spreadnuma, disabled, ...).",
        "STRATEGY",
        True,
    ),
    OptionSpec(
        ("--executable-cache-path",),
        "str",
        "executable_cache_path",
        "Executable cache directory, exported as JAX_COMPILATION_CACHE_DIR: XLA's persistent "
        "compilation cache stands in for Poplar's executable cache.",
        "DIR",
    ),
)

_BY_FLAG = {flag: spec for spec in OPTIONS for flag in spec.flags}


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """A parsed ``poprun-emu`` command line; defaults are PopRun's.

    Attributes:
        program: the program and its arguments, as given (empty only with --help/--version).
        no_effect: the V-IPU/partition options that were given, to report once.
    """

    num_replicas: int = 1
    num_instances: int = 1
    ipus_per_replica: int = 1
    hosts: tuple[str, ...] = ("localhost",)
    only_output_from_instance: int | None = None
    mpi_global_args: tuple[str, ...] = ()
    mpi_local_args: tuple[str, ...] = ()
    print_topology: bool = False
    numa_aware: bool = False
    offline_mode: bool = False
    system: str = ""
    calibration_family: str = ""
    calibrate_from: str = ""
    report_dir: str = ""
    executable_cache_path: str = ""
    collective_timeout: str = ""
    compute_device: str = "cpu"
    real_hosts: bool = False
    host_subnet: str = ""
    offline_representative: bool = False
    mpiexec: str = ""
    libmpi: str = ""
    import_config: str = ""
    export_config: str = ""
    overwrite_config: bool = False
    verbosity: int = 0
    help: bool = False
    version: bool = False
    version_format: str = "text"
    no_effect: tuple[str, ...] = ()
    program: tuple[str, ...] = ()


def _convert(spec: OptionSpec, flag: str, text: str) -> object:
    if spec.kind == "int":
        return parse_int(flag, text)
    if spec.kind == "bool":
        return parse_bool(flag, text)
    if spec.kind == "choice" and text not in spec.choices:
        raise UsageError(f"{flag} {text!r} is not one of {', '.join(spec.choices)}: pick one.")
    return text


def split_command_line(argv: Sequence[str]) -> tuple[list[tuple[str, str, str | None]], list[str]]:
    """Splits argv into the launcher's options and the program's command.

    Returns:
        ``(options, program)``: options as ``(dest, flag, value)`` triples in the order given
        (value None for flags, counts and bare booleans), and the program with its arguments.
    """
    options: list[tuple[str, str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return options, list(argv[i + 1 :])
        if not token.startswith("-") or token == "-":
            return options, list(argv[i:])
        if token.startswith("--"):
            flag, has_value, value = token.partition("=")
        elif token[:2] in _BY_FLAG and _BY_FLAG[token[:2]].kind == "str" and len(token) > 2:
            flag, has_value, value = token[:2], "=", token[2:].removeprefix("=")  # -Hhost0
        elif len(token) > 2 and set(token[1:]) == {"v"}:
            options.extend(("verbosity", "-v", None) for _ in token[1:])  # -vv
            i += 1
            continue
        else:
            flag, has_value, value = token, "", ""
        spec = _BY_FLAG.get(flag)
        if spec is None:
            raise unknown_option(token, _BY_FLAG)
        if spec.kind in ("int", "str", "choice"):
            if not has_value:
                if i + 1 >= len(argv):
                    raise UsageError(
                        f"{flag} needs a value: write {flag} {spec.metavar or 'VALUE'}."
                    )
                value = argv[i + 1]
                i += 1
            options.append((spec.dest, flag, value))
        elif spec.kind == "bool":
            # PopRun writes booleans as --numa-aware=yes, --numa-aware 1 or bare --numa-aware;
            # the next word is a value only when it is a boolean spelling.
            if not has_value and i + 1 < len(argv) and argv[i + 1].lower() in TRUE + FALSE:
                value, has_value = argv[i + 1], "="
                i += 1
            options.append((spec.dest, flag, value if has_value else None))
        else:
            if has_value:
                raise UsageError(f"{flag} takes no value, got {token!r}: write just {flag}.")
            options.append((spec.dest, flag, None))
        i += 1
    return options, []


def parse_command_line(argv: Sequence[str]) -> LaunchOptions:
    """Parses ``poprun-emu`` arguments (without the command name) into LaunchOptions.

    Only the syntax is checked here; the layout rules are ReplicaLayout's. An option given
    twice on the command line (or twice in a config file) is refused, except ``-v`` and
    ``--mpi-global-args``/``--mpi-local-args``, whose words accumulate (real scripts give
    ``--mpi-global-args`` once per MPI option); the command line overrides a config file.

    Raises:
        UsageError: an unknown option, a missing or malformed value.
    """
    options, program = split_command_line(argv)
    refuse_repeats(options, "")
    imported = [text for dest, _, text in options if dest == "import_config"]
    if imported and imported[-1]:
        config_options, rest = split_command_line([*read_config(imported[-1]), "--"])
        if rest:
            raise UsageError(
                f"--import-config {short(imported[-1])}: {short(rest[0])} is not an option, so "
                f"the words after it would be dropped: write the file with --export-config."
            )
        refuse_repeats(config_options, f"--import-config {short(imported[-1])}: ")
        nested = [flag for dest, flag, _ in config_options if dest in CONFIG_DESTS]
        if nested:
            raise UsageError(
                f"--import-config {short(imported[-1])}: a config cannot hold {nested[0]} (one "
                f"file, no chain or cycle of imports): write the file with --export-config."
            )
        options = config_options + options
    values: dict[str, object] = {"program": tuple(program)}
    counts: dict[str, int] = {}
    words_given: dict[str, tuple[str, ...]] = {}  # the accumulated --mpi-*-args words
    no_effect: list[str] = []
    for dest, flag, text in options:
        spec = _BY_FLAG[flag]
        if spec.kind == "count":
            counts[dest] = counts.get(dest, 0) + (2 if flag == "--vv" else 1)
            values[dest] = counts[dest]
        elif text is None:  # a flag or a bare boolean; split_command_line gives others a value
            values[dest] = True
        else:
            values[dest] = _convert(spec, flag, text)
        if spec.no_effect and spec.flags[-1] not in no_effect:
            no_effect.append(spec.flags[-1])
        if dest == "host":
            values["hosts"] = parse_hosts(str(values.pop("host")))
        elif dest in ("mpi_global_args", "mpi_local_args"):
            try:
                words = tuple(shlex.split(str(text)))
            except ValueError as error:
                raise UsageError(
                    f"{flag} {text!r} cannot be split into words ({error}): balance its quotes."
                ) from None
            words_given[dest] = words_given.get(dest, ()) + words
            values[dest] = words_given[dest]
    if values.get("export_config"):
        export_config(str(values["export_config"]), options, bool(values.get("overwrite_config")))
    fields = {f.name for f in dataclasses.fields(LaunchOptions)}
    # Each value has its field's type (the option's kind read it so), which mypy cannot tie
    # to a field named at run time.
    given: dict[str, Any] = {k: v for k, v in values.items() if k in fields}
    return LaunchOptions(**given, no_effect=tuple(no_effect))
