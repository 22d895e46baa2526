"""PopRun's ``--import-config`` / ``--export-config``: the options as a JSON list of words.

PopRun reads a configuration file whose values the command line overrides, and writes the
current configuration to one (``--overwrite-config`` allows replacing it). The emulator's file
is the option words themselves (``["--num-replicas=4", ...]``), read back through the same
parser, so every option and value form round-trips.

References:
    PopRun/PopDist User Guide, "Overview" (``--import-config``, ``--export-config``,
    ``--overwrite-config``).
"""

from __future__ import annotations

import json
import os

from contract import FileTooLargeError, arg_max, read_bounded, write_atomically
from launch._errors import UsageError

# Options whose words accumulate when given again (-v, -vv; one MPI option per word).
ACCUMULATING = frozenset({"verbosity", "mpi_global_args", "mpi_local_args"})


def refuse_repeats(options: list[tuple[str, str, str | None]], where: str) -> None:
    """Refuses an option given twice in one place (``where``: "" or the config file's name)."""
    seen: dict[str, str] = {}
    for dest, flag, _ in options:
        if dest in seen and dest not in ACCUMULATING:
            raise UsageError(
                f"{where}{flag} is given twice"
                + (f" (also as {seen[dest]})" if seen[dest] != flag else "")
                + ": give it once; the command line overrides --import-config."
            )
        seen.setdefault(dest, flag)


# The options about config files themselves: never written into one, refused in one.
CONFIG_DESTS = ("import_config", "export_config", "overwrite_config")


def read_config(path: str) -> list[str]:
    """The words of a config file written by --export-config (a JSON list of words)."""
    # The file stands for command-line words, which the kernel bounds by ARG_MAX.
    limit = arg_max()
    try:
        words = json.loads(read_bounded(path, limit))
    except FileTooLargeError:
        raise UsageError(
            f"--import-config {path!r} holds more than {limit} bytes (ARG_MAX, the most a "
            f"command line can hold): name a config written by --export-config."
        ) from None
    except OSError as error:
        raise UsageError(
            f"--import-config {path!r} cannot be read ({error.strerror}): check the path."
        ) from None
    except ValueError as error:
        raise UsageError(
            f"--import-config {path!r} is not a config written by --export-config ({error}): "
            f"write one with poprun-emu --export-config FILE ..."
        ) from None
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise UsageError(
            f"--import-config {path!r} must hold a JSON list of option words, as "
            f"--export-config writes: write one with poprun-emu --export-config FILE ..."
        )
    return words


def export_config(path: str, options: list[tuple[str, str, str | None]], overwrite: bool) -> None:
    if os.path.exists(path) and not overwrite:
        raise UsageError(
            f"--export-config {path!r} exists: add --overwrite-config=yes to replace it, or "
            f"pick another file."
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(
            f"--export-config {path!r}: directory {directory!r} does not exist: create it or "
            f"pick another file."
        )
    # An option both imported and given keeps the command line's value (the last), so the
    # file written is one --import-config reads back (it refuses an option given twice).
    last = {dest: i for i, (dest, _, _) in enumerate(options) if dest not in ACCUMULATING}
    words = []
    for i, (dest, flag, value) in enumerate(options):
        if dest in CONFIG_DESTS or last.get(dest, i) != i:
            continue
        words.append(flag if value is None else f"{flag}={value}")
    try:
        write_atomically(path, json.dumps(words, indent=1) + "\n")
    except OSError as error:
        raise UsageError(
            f"--export-config {path!r} cannot be written ({error.strerror}): pick a file in a "
            f"directory you can write."
        ) from None
