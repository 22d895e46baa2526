"""What made a report: the command, the date and the versions, so a page can be reproduced.

A report read weeks later (or sent to a colleague) must say which command produced it, when,
and with which versions of the emulator and of JAX: the simulated figures change when the
hardware model or its calibration does.
"""

from __future__ import annotations

import dataclasses
import datetime
import platform
import shlex
import sys
from importlib import metadata

# The distributions whose versions a report names.
_DISTRIBUTIONS = ("popdist-emu", "jax", "jaxlib")


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """The provenance of one report.

    Attributes:
        command: the ``poprun-emu`` command line (or the program's, outside the launcher).
        date: when the report was made, ISO 8601 in UTC to the second.
        versions: (name, version) of the emulator, JAX, jaxlib and Python.
    """

    command: str
    date: str
    versions: tuple[tuple[str, str], ...]

    def to_json(self) -> dict:
        """``summary.json``'s ``run`` object."""
        return {"command": self.command, "date": self.date, "versions": dict(self.versions)}

    def describe(self) -> str:
        """One line: the versions, e.g. ``popdist-emu 0.1.0, jax 0.10.2, Python 3.11.7``."""
        return ", ".join(f"{name} {version}" for name, version in self.versions)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def run_info(command: str = "", now: datetime.datetime | None = None) -> RunInfo:
    """The provenance of a report made now.

    Args:
        command: the launcher's command line (``InstanceEnvironment.command``); empty means
            the program was started without ``poprun-emu``, and its own command line is used.
        now: the time to record (default: the current time, in UTC).
    """
    if not command:
        command = shlex.join(["python", *sys.argv])
    when = now or datetime.datetime.now(datetime.timezone.utc)
    versions = tuple((name, _version(name)) for name in _DISTRIBUTIONS)
    return RunInfo(
        command=command,
        date=when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        versions=(*versions, ("Python", platform.python_version())),
    )
