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

import glob
import os
import shutil
import tempfile

from contract import pid_alive, read_bounded, write_atomically
from launch._job import pid_space

OWNER_FILE = "launcher.owner"
PREFIX = "poprun-emu-"


def claim(job_dir: str) -> None:
    """Records this launcher as the owner of ``job_dir`` (right after making it)."""
    write_atomically(os.path.join(job_dir, OWNER_FILE), f"{os.getpid()} {pid_space()}\n")


def _pid(path: str, space: str | None) -> int | None:
    """The pid a file of ``job_dir`` starts with (and, given ``space``, only when its second
    word is that pid space), or None when unreadable or of another space."""
    try:
        words = read_bounded(path, 512).decode("ascii", "replace").split()
    except OSError:
        return None
    if not words or not words[0].isdigit():
        return None
    if space is not None and words[1:2] != [space]:
        return None
    return int(words[0])


def _gone(job_dir: str, space: str) -> bool:
    """Whether ``job_dir``'s launcher, of this pid space, and every bootstrap that wrote a
    pid file there have exited."""
    launcher = _pid(os.path.join(job_dir, OWNER_FILE), space)
    if launcher is None or pid_alive(launcher):
        return False
    bootstraps = (_pid(path, None) for path in glob.glob(os.path.join(job_dir, "*.pid")))
    return not any(pid is not None and pid_alive(pid) for pid in bootstraps)


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
