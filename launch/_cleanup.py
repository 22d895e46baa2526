"""What a job leaves behind in shared memory, found and removed after the job.

MPICH (the ``mpich`` wheel's ch4/shm) keeps one POSIX shared-memory segment per host and job,
``/dev/shm/mpich_shm_<hex>_<n>``, from ``MPI_Init`` to ``MPI_Finalize``, and unlinks it only
there: every job whose ranks die or abort leaves it behind (measured: 2 to 4 MiB each). Open
MPI's shared-memory transport does the same with ``sm_segment.*`` (5.x) and
``vader_segment.*`` (4.x) files. The name carries nothing of the job, so the launcher
removes, after its job has ended, the segments created while the job ran that no live process
maps any more: a segment in use by another job is always mapped by the rank that created it,
so it is never touched.

References:
    ``shm_overview(7)``: POSIX shared memory objects live in ``/dev/shm`` until unlinked,
    even when no process maps them; ``proc(5)``: ``/proc/<pid>/maps`` lists mapped files.
"""

from __future__ import annotations

import contextlib
import os

SHM_DIR = "/dev/shm"
PREFIXES = ("mpich_shm_", "sm_segment.", "vader_segment.")


def _candidates(since_ns: int, shm_dir: str) -> dict[str, str]:
    found = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(shm_dir):
            if not entry.name.startswith(PREFIXES):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if info.st_ctime_ns >= since_ns and info.st_uid == os.geteuid():
                    found[entry.path] = entry.name
    return found


def _mapped(names: set[str]) -> set[str]:
    """Which of the segment ``names`` some live process maps (read from /proc/*/maps)."""
    mapped = set()
    with contextlib.suppress(OSError):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", "rb") as f:
                for line in f:
                    if b"/dev/shm/" in line:
                        name = line.rsplit(b"/", 1)[-1].split()[0].decode(errors="replace")
                        if name in names:
                            mapped.add(name)
    return mapped


def remove_leftover_segments(since_ns: int, shm_dir: str = SHM_DIR) -> list[str]:
    """Unlinks MPI segments made since ``since_ns`` (``time.time_ns()``) that nobody maps.

    Returns:
        The paths removed.
    """
    candidates = _candidates(since_ns, shm_dir)
    if not candidates:
        return []
    in_use = _mapped(set(candidates.values()))
    removed = []
    for path, name in candidates.items():
        if name not in in_use:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
    return removed
