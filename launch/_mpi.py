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
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from launch._errors import UsageError

Flavour = Literal["hydra", "openmpi", "other"]

# Open MPI options PopRun scripts use, with the number of values each takes. Hydra has no
# equivalent for them; --tag-output is dropped under every MPI because the bootstrap tags.
_OPENMPI_ONLY = {
    "tag-output": 0,
    "allow-run-as-root": 0,
    "oversubscribe": 0,
    "report-bindings": 0,
    "bind-to": 1,
    "map-by": 1,
    "rank-by": 1,
    "mca": 2,
}


def find_mpiexec(environ: Mapping[str, str] | None = None) -> str:
    """Path of the mpiexec to use: the one beside this interpreter, else the one on PATH.

    Raises:
        UsageError: no mpiexec anywhere, with the fix (``pip install mpich``).
    """
    for directory in (os.path.dirname(sys.executable), sysconfig.get_path("scripts")):
        candidate = os.path.join(directory, "mpiexec")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    path = (environ if environ is not None else os.environ).get("PATH")
    found = shutil.which("mpiexec", path=path)
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
    """MPI arguments sorted out: what goes to mpiexec, what is exported, what is dropped."""

    args: tuple[str, ...]
    exports: tuple[tuple[str, str], ...]
    dropped: tuple[str, ...]


def adapt_mpi_args(tokens: Sequence[str], flavour: Flavour, environ: Mapping[str, str]) -> MpiArgs:
    """Turns PopRun's Open MPI-style arguments into what this MPI and the bootstrap need.

    ``-x NAME=VALUE`` exports the value to every instance and ``-x NAME`` the launcher's own
    value (skipped when unset, as mpirun does); the bootstrap sets them, whatever the MPI.

    Args:
        tokens: words of ``--mpi-global-args`` or ``--mpi-local-args``.
        flavour: the MPI in use.
        environ: the launcher's environment, for ``-x NAME``.
    """
    args: list[str] = []
    exports: list[tuple[str, str]] = []
    dropped: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "-x":
            if i + 1 >= len(tokens):
                raise UsageError(
                    "--mpi-local-args/--mpi-global-args: -x needs NAME or NAME=VALUE after "
                    "it: write -x NAME=VALUE."
                )
            name, has_value, value = tokens[i + 1].partition("=")
            if has_value:
                exports.append((name, value))
            elif name in environ:
                exports.append((name, environ[name]))
            i += 2
            continue
        name = token.lstrip("-")
        arity = _OPENMPI_ONLY.get(name) if token.startswith("-") else None
        if arity is not None and (flavour != "openmpi" or name == "tag-output"):
            dropped.append(" ".join(tokens[i : i + 1 + arity]))
            i += 1 + arity
            continue
        args.append(token)
        i += 1
    return MpiArgs(tuple(args), tuple(exports), tuple(dropped))


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
