"""Job directories of launchers that were killed, removed at the next start.

A launcher removes its job directory when the job ends, but a whole-job SIGKILL gives it no
chance, and ``poprun-emu-*`` directories would pile up in the temporary directory. Each
launcher records itself in its directory (:data:`OWNER_FILE`: its pid and process-id space,
``launch._job.pid_space``), and the next launcher of the same user removes a directory
whose launcher and bootstraps are all gone from this boot and pid namespace. A directory
without that record, of another user, or of another pid space (another container, another
host on a shared disk) is left alone: its owner cannot be known to be gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from contract import (
    FileTooLargeError,
    pid_alive,
    pid_file_instances,
    read_bounded,
    read_pid_file,
    write_atomically,
)
from launch._job import pid_space

OWNER_FILE = "launcher.owner"
PREFIX = "poprun-emu-"


def claim(job_dir: str) -> None:
    """Records this launcher as the owner of ``job_dir`` (right after making it)."""
    write_atomically(os.path.join(job_dir, OWNER_FILE), f"{os.getpid()} {pid_space()}\n")


def _launcher(job_dir: str, space: str) -> int | None:
    """The pid of ``job_dir``'s launcher when it recorded this pid space, else None."""
    try:
        words = read_bounded(os.path.join(job_dir, OWNER_FILE), 512).split()
    except (OSError, FileTooLargeError):
        return None
    if len(words) != 2 or not words[0].isdigit() or words[1] != space.encode():
        return None
    return int(words[0])


def _gone(job_dir: str, space: str) -> bool:
    """Whether ``job_dir``'s launcher, of this pid space, and every bootstrap that recorded
    itself there (``contract.read_pid_file``) have exited; a zombie has."""
    launcher = _launcher(job_dir, space)
    if launcher is None or pid_alive(launcher):
        return False
    bootstraps = (read_pid_file(job_dir, i) for i in pid_file_instances(job_dir))
    return not any(record is not None and pid_alive(record[0]) for record in bootstraps)


def sweep_stale(directory: str | None = None) -> list[str]:
    """Removes this user's ``poprun-emu-*`` directories in ``directory`` (default: the
    temporary directory) whose owners are gone, and returns their paths."""
    space = pid_space()
    if not space:
        return []
    directory = directory or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        try:
            if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue
        except OSError:
            continue
        if _gone(entry.path, space):
            shutil.rmtree(entry.path, ignore_errors=True)
            if not os.path.lexists(entry.path):
                removed.append(entry.path)
    return removed
