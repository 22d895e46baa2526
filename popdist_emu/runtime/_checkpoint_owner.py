"""Which job uses a checkpoint directory: one job at a time writes and reads it.

Two jobs given the same ``--checkpoint-dir`` would interleave their checkpoints, and a resume
would read the other job's. The first instance of a job records the job in
:data:`OWNER_FILE` under an exclusive ``flock`` of :data:`LOCK_FILE`; the job's other instances
find their own job there, another job that is still running is refused, and a record left by
a process that died is taken over.

References:
    ``flock(2)``: an advisory lock on an open file, released when the descriptor closes.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Mapping
from typing import Any

from contract import InstanceEnvironment, pid_alive, special_kind, write_atomically
from popdist_emu.runtime._trainer import Trainer

OWNER_FILE = ".checkpoint.owner"  # the job that writes and reads this directory
LOCK_FILE = ".checkpoint.lock"  # flock'd while the owner is read or changed
_claimed: set[str] = set()


class CheckpointError(ValueError):
    """A checkpoint that is missing or does not fit the trainer resuming from it."""


def _job(job_dir: str) -> dict[str, str | int]:
    """This job: the launcher's job directory (one per poprun-emu run, shared by its
    instances), else this process; and who holds the claim (host, pid) to tell if it lives."""
    job = job_dir or f"process {os.getpid()}"
    return {
        "job": f"{socket.gethostname()}:{job}",
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


def claim_for(directory: str | os.PathLike[str], trainer: Trainer) -> None:
    """The trainer's job claims ``directory``. Without a job directory (an explicit layout)
    the other instances of the job cannot be told from another job's, so instance 0's claim
    alone guards the directory."""
    options = trainer.options
    if options.job_dir or options.instance_index == 0:
        claim_directory(directory, options.job_dir)


def claim_directory(directory: str | os.PathLike[str], job_dir: str | None = None) -> None:
    """Makes this job the one job that writes and reads checkpoints in ``directory``.

    Every instance calls it (``popdist_emu.claim_checkpoint_dir``, before compiling;
    ``save_checkpoint`` and ``restore_checkpoint`` call it too); the first records the job
    in ``OWNER_FILE`` under an exclusive ``flock``, the job's other instances find their own
    job there. The record is removed
    when its writer exits; one left by a process that died is taken over.

    Args:
        directory: the checkpoint directory (made if missing).
        job_dir: the job's ``Options().job_dir``; None reads ``poprun-emu``'s job directory
            from the environment now (a program's own call, before it builds a trainer).

    Raises:
        CheckpointError: another job that is still running holds the directory.
    """
    directory = os.path.abspath(os.fspath(directory))
    if directory in _claimed:
        return
    os.makedirs(directory, exist_ok=True)
    for name in (LOCK_FILE, OWNER_FILE):
        kind = special_kind(os.path.join(directory, name), follow_symlinks=False)
        if kind:
            raise CheckpointError(
                f"{os.path.join(directory, name)} is a {kind}, where this job records who uses "
                f"{directory}: remove it, or give another --checkpoint-dir."
            )
    if job_dir is None:
        job_dir = InstanceEnvironment.from_environ().job_dir
    me = _job(job_dir)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(os.path.join(directory, LOCK_FILE), flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        owner_path = os.path.join(directory, OWNER_FILE)
        owner: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError), open(owner_path) as f:
            owner = json.load(f)
        if owner and owner.get("job") != me["job"]:
            alive = owner.get("host") != me["host"] or pid_alive(int(owner.get("pid", 0)))
            if alive:
                raise CheckpointError(
                    f"{directory} is in use by another job ({owner.get('job')}, pid "
                    f"{owner.get('pid')}): its checkpoints would interleave with this job's; "
                    f"wait for it to end or give another --checkpoint-dir (remove "
                    f"{owner_path} only if that job is gone)."
                )
        if owner.get("job") != me["job"]:
            write_atomically(owner_path, json.dumps(me) + "\n")
            atexit.register(_release, owner_path, me)
        _claimed.add(directory)
    finally:
        os.close(fd)  # the flock goes with it


def _release(owner_path: str, me: Mapping[str, str | int]) -> None:
    with contextlib.suppress(OSError, ValueError), open(owner_path) as f:
        if json.load(f) == dict(me):
            os.unlink(owner_path)
