"""How each instance ended, as its bootstrap recorded it in the job directory.

A bootstrap writes its program's exit status (``launch._job.status_path``; a failing status
also before the program's exit handlers run, ``leaving_path``); the watchdog reads them with
their times, names the first failure and decides whether it ended the other instances.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from launch._job import status_path


def how_it_ended(code: int) -> str:
    """How a process ended, from ``Popen.returncode`` (-N = killed by signal N)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"


def shell_code(code: int) -> int:
    """A shell's exit code for ``Popen.returncode``: 128+N for signal N (PopRun's)."""
    return 128 - code if code < 0 else code


class InstanceExit(NamedTuple):
    """How one instance's program ended: ``code`` as ``Popen.returncode`` (-N = signal N)."""

    instance: int
    code: int
    when_ns: int

    def describe(self) -> str:
        return f"instance {self.instance} {how_it_ended(self.code)}"

    @property
    def launcher_code(self) -> int:
        """The launcher's exit code for this failure: the instance's, or 128+signal."""
        return shell_code(self.code)


def others_were_running(
    first: InstanceExit | None,
    exits: Mapping[int, InstanceExit],
    num_instances: int,
    finished: bool,
) -> bool:
    """Whether the job's other instances were still running when it failed, so that the
    failure's line may say the launcher ended them.

    They were if some have not exited yet, or if, after ``first`` (the first failure), others
    failed too: the fail-fast it set off (a waiting peer's ``gcl.PeerLeft``) may end them all
    before the watchdog looks. Instances that exited 0 after it had finished on their own.
    """
    ended = {*exits, *([first.instance] if first is not None else [])}  # a failure ended
    if not finished and len(ended) < num_instances:  # its instance, status written or not
        return True
    return first is not None and any(
        e.code != 0 and e.when_ns > first.when_ns
        for e in exits.values()
        if e.instance != first.instance
    )


def read_exits(
    job_dir: str, instances: Sequence[int], path_of: Callable[[str, int], str] = status_path
) -> dict[int, InstanceExit]:
    """The exit statuses the bootstraps wrote so far (``path_of=leaving_path``: the failing
    statuses programs announced before their exit handlers ran)."""
    exits = {}
    for i in instances:
        path = path_of(job_dir, i)
        try:
            with open(path) as f:
                text = f.read().strip()
            exits[i] = InstanceExit(i, int(text), os.stat(path).st_mtime_ns)
        except (FileNotFoundError, ValueError):
            continue
    return exits
