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

from launch._errors import UsageError
from popdist_emu._files import write_atomically


def read_config(path: str) -> list[str]:
    """The words of a config file written by --export-config (a JSON list of words)."""
    try:
        with open(path) as f:
            words = json.load(f)
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
    words = []
    for dest, flag, value in options:
        if dest in ("import_config", "export_config", "overwrite_config"):
            continue
        words.append(flag if value is None else f"{flag}={value}")
    write_atomically(path, json.dumps(words, indent=1) + "\n")
