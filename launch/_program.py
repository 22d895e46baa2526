"""The program an instance runs: a Python script (run with this interpreter) or an executable."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from launch._errors import UsageError

_USAGE = "usage: poprun-emu [options] program [args], e.g. poprun-emu --num-replicas 4 train.py"


def _check_readable_file(path: str, what: str) -> None:
    if not os.path.exists(path):
        raise UsageError(f"{what} {path!r} does not exist: check the path ({_USAGE}).")
    if not os.path.isfile(path):
        raise UsageError(f"{what} {path!r} is not a file: give the path of a script.")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{what} {path!r} is not readable: fix its permissions (chmod +r).")


def program_command(program: Sequence[str], *, python: str) -> list[str]:
    """The command every instance runs, checked before anything starts.

    A path ending in ``.py`` or an existing non-executable file is a Python script and runs
    with ``python`` (the launcher's interpreter, so the emulator is importable); anything else
    is an executable, looked up on PATH when it has no slash (``python3 train.py``).

    Args:
        program: the program and its arguments.
        python: the interpreter for Python scripts.

    Raises:
        UsageError: no program, or a missing, unreadable or non-executable one.
    """
    if not program:
        raise UsageError(f"no program given: {_USAGE}.")
    name, *args = program
    is_script = name.endswith(".py") or (os.path.isfile(name) and not os.access(name, os.X_OK))
    if is_script:
        _check_readable_file(name, "program")
        return [python, name, *args]
    if os.sep in name:
        if not (os.path.isfile(name) and os.access(name, os.X_OK)):
            raise UsageError(
                f"program {name!r} is not an executable file: check the path, or run a "
                f"script as poprun-emu [options] script.py."
            )
    elif shutil.which(name) is None:
        raise UsageError(
            f"program {name!r} was not found on PATH: give its path, or run a script as "
            f"poprun-emu [options] script.py."
        )
    # An interpreter given a missing script would fail once per instance; refuse it now.
    if os.path.basename(name).startswith("python") and args and args[0].endswith(".py"):
        _check_readable_file(args[0], f"{name}'s script")
    return [name, *args]
