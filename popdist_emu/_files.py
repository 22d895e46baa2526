"""Files written so that a reader sees the old file or the whole new one, never a part.

Every file the project writes (parameters, reports, checkpoints, the launcher's job files)
goes through :func:`atomic_write`: the content is written to a temporary file in the same
directory, flushed to disk, and renamed over the destination. A failed or interrupted write
leaves the previous file intact, and the rename replaces a symlink at the destination
instead of following it. A writer killed mid-write (SIGKILL) cannot remove its temporary
file, so each temporary carries its writer's pid and the next write of the same file removes
those of writers no longer alive. JAX-free, so the launcher may use it too.

References:
    POSIX ``rename(2)``: "If newpath already exists, it will be atomically replaced"; a
    symbolic link named by newpath is itself replaced. The same write-then-rename is what
    ``git`` and SQLite's rollback journal rely on.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import IO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temporaries(directory: str, name: str) -> None:
    """Removes ``.<name>.<pid>.*.tmp`` files left by writers that died mid-write."""
    prefix = f".{name}."
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if not (entry.name.startswith(prefix) and entry.name.endswith(".tmp")):
                continue
            pid = entry.name[len(prefix) :].split(".", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Yields a file to write ``path``'s new content into; renamed into place on success.

    Args:
        path: the destination; its directory must exist.
        mode: ``"wb"`` or ``"w"`` (text, UTF-8).

    Raises:
        OSError: the temporary file could not be created or written (e.g. disk full); the
            destination is then untouched and no temporary file is left behind.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write: `mode` must be 'wb' or 'w', got {mode!r}.")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    _remove_stale_temporaries(directory, name)
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    try:
        # mkstemp makes the file 0600; give it the permissions open() would have given.
        os.fchmod(fd, 0o666 & ~_umask())
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_atomically(path: str | os.PathLike, data: bytes | str) -> None:
    """Writes ``data`` (bytes, or text as UTF-8) to ``path`` through :func:`atomic_write`."""
    with atomic_write(path, "w" if isinstance(data, str) else "wb") as f:
        f.write(data)


class FileTooLargeError(ValueError):
    """A file read through :func:`read_bounded` holds more than its bound."""


def read_bounded(path: str | os.PathLike, limit: int) -> bytes:
    """``path``'s content, read without ever holding more than ``limit`` + 1 bytes.

    A device (``/dev/zero``, ``/dev/urandom``) or a file of any size is refused after
    ``limit`` + 1 bytes, so a wrong path cannot make the reader's memory grow without bound.

    Raises:
        OSError: the file cannot be opened or read.
        FileTooLargeError: it holds more than ``limit`` bytes.
    """
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(f"holds more than {limit} bytes")
    return data


def arg_max() -> int:
    """The kernel's limit on a command line plus its environment, in bytes (``ARG_MAX``)."""
    try:
        return int(os.sysconf("SC_ARG_MAX"))
    except (ValueError, OSError):
        return 131072  # POSIX's minimum for ARG_MAX is 4096; Linux's historic value
