"""The MPI launcher under ``poprun-emu``: which mpiexec, which flavour, and its command line.

The mpiexec next to the running interpreter comes first (the ``mpich`` wheel installs it
there), so ``pip install`` alone gives a working job; a system MPI on PATH is the fallback.
PopRun drives Open MPI, so real scripts pass Open MPI options in ``--mpi-global-args``; under
MPICH's Hydra those that have no Hydra meaning are dropped (and reported) instead of failing.

References:
    MPICH Hydra usage (``mpiexec -n N [local args] program``); Open MPI ``mpirun(1)``
    (``--bind-to none``, ``--oversubscribe``, ``--allow-run-as-root``, ``-x NAME[=VALUE]``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from contract import EMULATOR_VARIABLES, ENV_MPIEXEC, POPRUN_VARIABLES
from launch._errors import UsageError
from launch._hosts import short

Flavour = Literal["hydra", "openmpi", "other", "none"]  # none: no mpiexec runs

# mpirun options with an equivalent here, whatever the MPI: the bootstrap tags output, writes
# per-instance log files, exports variables and pins each instance itself; Open MPI gets
# --allow-run-as-root and --oversubscribe from mpiexec_command, and Hydra needs neither.
_TRANSLATED = {"tag-output": 0, "allow-run-as-root": 0, "oversubscribe": 0, "output-filename": 1}
# Refused: they contradict the layout poprun-emu computes (instances and hosts).
_REFUSED = {
    "np": "the instance count is --num-instances",
    "n": "the instance count is --num-instances",
    "c": "the instance count is --num-instances",
    "H": "hosts are poprun-emu's -H (with --real-hosts to run on them)",
    "host": "hosts are poprun-emu's -H (with --real-hosts to run on them)",
    "hosts": "hosts are poprun-emu's -H (with --real-hosts to run on them)",
    "hostfile": "hosts are poprun-emu's -H (with --real-hosts to run on them)",
    "machinefile": "hosts are poprun-emu's -H (with --real-hosts to run on them)",
    "f": "hosts are poprun-emu's -H (with --real-hosts to run on them)",
}
# Open MPI options real PopRun scripts use, with the number of values each takes; passed to
# Open MPI, dropped with a note under another MPI (they tune transports, mapping or reports
# and change no number of the job).
_OPENMPI = {
    "mca": 2,
    "gmca": 2,
    "bind-to": 1,
    "map-by": 1,
    "rank-by": 1,
    "report-bindings": 0,
    "display-map": 0,
    "display-allocation": 0,
    "prefix": 1,
    "timestamp-output": 0,
    "merge-stderr-to-stdout": 0,
    "verbose": 0,
    "quiet": 0,
    "q": 0,
    "mca-params": 1,
    "tune": 1,
}
# MPICH Hydra's own options (``mpiexec -help``) with their value counts; passed to Hydra.
_HYDRA = {
    "genv": 2,
    "env": 2,
    "genvlist": 1,
    "envlist": 1,
    "genvnone": 0,
    "envnone": 0,
    "genvall": 0,
    "envall": 0,
    "wdir": 1,
    "launcher": 1,
    "launcher-exec": 1,
    "rmk": 1,
    "topolib": 1,
    "bind-to": 1,
    "map-by": 1,
    "membind": 1,
    "demux": 1,
    "iface": 1,
    "ppn": 1,
    "usize": 1,
    "verbose": 0,
    "info": 0,
    "prepend-rank": 0,
    "print-all-exitcodes": 0,
    "disable-auto-cleanup": 0,
    "disable-hostname-propagation": 0,
    "profile": 0,
    "nameserver": 1,
    "localhost": 1,
}
# Options whose first value names an environment variable (Hydra's), checked as -x names are.
_NAMING = ("genv", "env", "genvlist", "envlist")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_variable_name(name: str, option: str) -> None:
    """Refuses an exported name that is no variable name (``-x =v``) or one poprun-emu sets
    for each instance (the layout PopDist reads, the bootstrap's configuration): a user's
    value would give the instances another job than the one launched."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"{option} {short(name)} is not a variable name (letters, digits and _, not first "
            f"a digit): write {option} NAME=VALUE."
        )
    if name in EMULATOR_VARIABLES or name in POPRUN_VARIABLES:
        raise UsageError(
            f"{option} {name}: poprun-emu sets {name} for each instance from its own options "
            f"(the layout, the job); set those options instead."
        )


# bind-to values the launch honours as given: the MPI binds nothing (PopRun's own mpirun
# passes --bind-to none) and the bootstrap pins each instance to one CPU.
_ONE_CPU_BINDINGS = ("none", "core", "hwthread", "cpu")


def find_mpiexec(environ: Mapping[str, str] | None = None, explicit: str = "") -> str:
    """Path of the mpiexec to use.

    In order: ``explicit`` (``--mpiexec``), ``POPDIST_EMU_MPIEXEC``, the one beside this
    interpreter (the ``mpich`` wheel's), the one on PATH.

    Raises:
        UsageError: a named mpiexec that is not an executable, or no mpiexec anywhere, with
            the fix (``pip install mpich``).
    """
    environ = os.environ if environ is None else environ
    named = explicit or environ.get(ENV_MPIEXEC, "")
    if named:
        found = shutil.which(named, path=environ.get("PATH")) if os.sep not in named else named
        if not found or not (os.path.isfile(found) and os.access(found, os.X_OK)):
            raise UsageError(
                f"--mpiexec {named!r} is not an executable: give the path of the system MPI's "
                f"mpiexec (e.g. /usr/bin/mpiexec.openmpi)."
            )
        return os.path.abspath(found)
    for directory in (os.path.dirname(sys.executable), sysconfig.get_path("scripts")):
        candidate = os.path.join(directory, "mpiexec")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("mpiexec", path=environ.get("PATH"))
    if found is None:
        raise UsageError(
            "no mpiexec found beside the interpreter or on PATH: install the MPI wheel "
            "(pip install mpich) or a system MPI, or use --offline-mode."
        )
    return found


def mpi_flavour(mpiexec: str) -> Flavour:
    """Tells MPICH Hydra from Open MPI by ``mpiexec --version``."""
    try:
        out = subprocess.run(
            [mpiexec, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "other"
    text = (out.stdout + out.stderr).lower()
    if "hydra" in text or "mpich" in text:
        return "hydra"
    if "open mpi" in text or "openrte" in text or "open-mpi" in text:
        return "openmpi"
    return "other"


class MpiArgs(NamedTuple):
    """MPI arguments sorted out: what goes to mpiexec, what is exported, what is dropped.

    Attributes:
        args: words for mpiexec.
        exports: ``(name, value)`` for every instance (from ``-x``).
        dropped: options not honoured, each with the reason, for one note line.
        output_dir: ``--output-filename DIR`` (absolute), or "".
        translated: options honoured by poprun-emu itself rather than by mpiexec.
        tag_output: ``--tag-output`` was given: tag every line, even of one instance.
        unknown: options passed to mpiexec that are in none of our tables.
    """

    args: tuple[str, ...]
    exports: tuple[tuple[str, str], ...]
    dropped: tuple[str, ...]
    output_dir: str = ""
    translated: tuple[str, ...] = ()
    tag_output: bool = False
    unknown: tuple[str, ...] = ()


def check_with_mpiexec(mpiexec: str, flavour: Flavour, args: Sequence[str]) -> None:
    """Asks Hydra whether it accepts ``args`` before anything is launched: ``mpiexec ARGS
    --version`` parses every argument and exits without starting a process, 255 with
    "unrecognized argument X" for one it does not know (which would otherwise end the
    launched job with mpiexec's 255). Other MPIs are not asked.

    Raises:
        UsageError: Hydra refused an argument (its own words, in one line).
    """
    if flavour != "hydra" or not args:
        return
    try:
        out = subprocess.run(
            [mpiexec, *args, "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return  # the launch itself will report what is wrong with mpiexec
    if out.returncode != 0:
        words = re.search(r"unrecognized argument (\S+)", out.stderr)
        what = f"does not know {words.group(1)!r}" if words else "refused them"
        raise UsageError(
            f"MPI arguments {short(' '.join(args))}: MPICH's mpiexec (Hydra) {what}: remove "
            f"it from --mpi-global-args/--mpi-local-args (see mpiexec -help)."
        )


def _flavour_name(flavour: Flavour) -> str:
    return {"hydra": "MPICH's mpiexec (Hydra)", "openmpi": "Open MPI"}.get(flavour, "this MPI")


def _values(tokens: Sequence[str], at: int, token: str, arity: int) -> tuple[list[str], int]:
    """The ``arity`` values of the option at ``tokens[at]`` (``--opt=v`` counts as one) and
    the index of its last word."""
    _, has_inline, inline = token.partition("=")
    values = [inline] if has_inline else []
    need = arity - len(values)
    if need > len(tokens) - at - 1:
        raise UsageError(
            f"MPI argument {token} needs {arity} value(s) after it: write e.g. "
            f"{token.split('=')[0]} VALUE."
        )
    return values + list(tokens[at + 1 : at + 1 + need]), at + need


def adapt_mpi_args(tokens: Sequence[str], flavour: Flavour, environ: Mapping[str, str]) -> MpiArgs:
    """Turns PopRun's Open MPI-style arguments into what this MPI and the bootstrap need.

    - Translated whatever the MPI: ``-x NAME=VALUE`` exports the value to every instance and
      ``-x NAME`` the launcher's own value (skipped when unset, as mpirun does);
      ``--tag-output`` (the bootstrap tags); ``--output-filename DIR`` (per-instance
      files written by the bootstrap in Open MPI's layout); ``--allow-run-as-root`` and
      ``--oversubscribe`` (added for Open MPI as needed, Hydra needs neither); ``--bind-to
      core|hwthread`` (each instance is pinned to one CPU anyway).
    - Passed through: options this MPI understands (Open MPI's to Open MPI, Hydra's to Hydra).
    - Dropped with a note: Open MPI tuning options (``--mca``, ``--map-by``, other
      ``--bind-to`` values, ...) under another MPI; they change no number of the job.
    - Refused: ``-np``/``-n``/``-H``/``--hostfile`` (they contradict the layout).
    - Anything else goes to mpiexec as given; an MPI that does not know it fails, and the
      watchdog reports mpiexec's exit.

    Args:
        tokens: words of ``--mpi-global-args`` or ``--mpi-local-args``.
        flavour: the MPI in use ("other" checks the syntax only).
        environ: the launcher's environment, for ``-x NAME``.

    Raises:
        UsageError: a malformed ``-x`` or ``--output-filename``, or a refused option.

    References:
        Open MPI ``mpirun(1)`` (4.1: ``--output-filename``, ``-x``, ``--tag-output``,
        ``--bind-to``); MPICH Hydra ``mpiexec -help``.
    """
    args: list[str] = []
    exports: list[tuple[str, str]] = []
    dropped: list[str] = []
    translated: list[str] = []
    output_dir = ""
    unknown: list[str] = []
    after_unknown = False
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "-x" or token.startswith("-x="):
            value = token[3:] if token.startswith("-x=") else None
            if value is None:
                if i + 1 >= len(tokens):
                    raise UsageError(
                        "--mpi-local-args/--mpi-global-args: -x needs NAME or NAME=VALUE after "
                        "it: write -x NAME=VALUE."
                    )
                value = tokens[i + 1]
                i += 1
            name, has_value, text = value.partition("=")
            check_variable_name(name, "-x")
            if has_value:
                exports.append((name, text))
            elif name in environ:
                exports.append((name, environ[name]))
            i += 1
            continue
        if token == ":":
            raise UsageError(
                "MPI argument ':' starts another program (MPMD), but poprun-emu starts one: "
                "remove it from --mpi-global-args/--mpi-local-args."
            )
        if not token.startswith("-") or token == "-":
            if not after_unknown:
                raise UsageError(
                    f"MPI argument {short(token)} is neither an option nor an option's value: "
                    f"remove it from --mpi-global-args/--mpi-local-args (the program and its "
                    f"arguments follow poprun-emu's options)."
                )
            if flavour != "none":
                args.append(token)  # a value of a passed-through option
            i += 1
            continue
        after_unknown = False
        name = token.lstrip("-").partition("=")[0]

        if name in _REFUSED:
            raise UsageError(
                f"MPI argument {token} cannot be honoured: {_REFUSED[name]}; remove it from "
                f"--mpi-global-args/--mpi-local-args."
            )
        if name in _TRANSLATED:
            values, i = _values(tokens, i, token, _TRANSLATED[name])
            if name == "output-filename":
                if not values[0]:
                    raise UsageError(
                        "--output-filename needs a directory: write --output-filename DIR."
                    )
                output_dir = os.path.abspath(values[0])
            translated.append(" ".join([token.split("=")[0], *values]))
        elif name == "bind-to":
            (value,), i = _values(tokens, i, token, 1)
            if value.split(":")[0] in _ONE_CPU_BINDINGS:
                translated.append(f"--bind-to {value}")
            else:
                dropped.append(
                    f"--bind-to {value} (each instance stays pinned to one CPU, so that "
                    f"every instance computes the same bits)"
                )
        elif flavour == "none":
            arity = _OPENMPI.get(name, _HYDRA.get(name, 0))
            values, i = _values(tokens, i, token, arity)
            dropped.append(" ".join([token, *values]) + " (no mpiexec runs for one instance)")
        elif flavour == "openmpi" and name in _OPENMPI:
            values, i = _values(tokens, i, token, _OPENMPI[name])
            args.extend([token, *values])
        elif flavour == "hydra" and name in _HYDRA:
            values, i = _values(tokens, i, token, _HYDRA[name])
            if name in _NAMING:
                for variable in values[0].split(","):
                    check_variable_name(variable, token.split("=")[0])
            args.extend([token, *values])
        elif name in _OPENMPI and flavour != "other":
            values, i = _values(tokens, i, token, _OPENMPI[name])
            dropped.append(
                " ".join([token, *values])
                + f" (an Open MPI option with no equivalent in {_flavour_name(flavour)}; "
                "it changes no number of the job)"
            )
        elif flavour == "other" and name in _OPENMPI:
            _, i = _values(tokens, i, token, _OPENMPI[name])  # syntax check only
        else:
            # Not in our tables: the MPI in use reads it; Hydra's is checked before launch
            # (check_with_mpiexec). A bare word after it may be its value.
            args.append(token)
            unknown.append(token)
            after_unknown = True
        i += 1
    tag_output = any(t.startswith("--tag-output") for t in translated)
    return MpiArgs(
        tuple(args),
        tuple(exports),
        tuple(dropped),
        output_dir,
        tuple(translated),
        tag_output,
        tuple(unknown),
    )


def mpiexec_command(
    mpiexec: str,
    flavour: Flavour,
    *,
    num_instances: int,
    global_args: Sequence[str],
    local_args: Sequence[str],
    bootstrap: Sequence[str],
    is_root: bool,
) -> list[str]:
    """``mpiexec [needed] [global] -n I [local] <bootstrap...>``, never a shell string."""
    command = [mpiexec]
    if flavour == "openmpi":
        # Open MPI binds ranks to cores by default and refuses more ranks than cores; the
        # bootstrap pins each instance itself, and instances may outnumber the CPUs.
        command += ["--bind-to", "none", "--oversubscribe"]
        if is_root:
            command.append("--allow-run-as-root")
    return [*command, *global_args, "-n", str(num_instances), *local_args, *bootstrap]
