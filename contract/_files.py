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
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import IO, BinaryIO

from contract._processes import pid_alive


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


_KINDS = (
    (stat.S_ISCHR, "character device"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISLNK, "symbolic link"),  # only where links are not followed
)
_STREAMS = ("character device", "FIFO")  # written in place, never replaced


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, when it is no regular file."""
    return next((kind for test, kind in _KINDS if test(mode)), "special file")


def special_kind(path: str | os.PathLike, follow_symlinks: bool = True) -> str | None:
    """What ``path`` is when it is not a regular file (a FIFO, a device, a directory, a
    socket; a symbolic link when not followed); None when it is a regular file or does not
    exist."""
    try:
        mode = os.stat(path, follow_symlinks=follow_symlinks).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def _fd_link(path: str) -> bool:
    """Whether ``path`` is a link to a process's open file (``/dev/stdout`` and ``/dev/fd/N``
    point into ``/proc/self/fd``): a write goes to that stream, never replaces the link."""
    with contextlib.suppress(OSError):
        return os.path.islink(path) and os.readlink(path).startswith("/proc/")
    return False


@contextlib.contextmanager
def _write_in_place(path: str, kind: str, mode: str) -> Iterator[IO]:
    """Writes a stream destination (a character device, a FIFO, ``/dev/stdout``) in place;
    a FIFO nobody reads is refused instead of blocking (opened ``O_NONBLOCK``: ``ENXIO``).
    ``O_APPEND``: ``/dev/stdout`` redirected to a file adds to it, as the shell's own writes
    do, instead of writing over its start."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, f"a {kind} that no process reads") from None
        raise
    os.set_blocking(fd, True)
    encoding = None if "b" in mode else "utf-8"
    with os.fdopen(fd, mode, encoding=encoding) as f:
        yield f


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Yields a file to write ``path``'s new content into; renamed into place on success.

    A destination that is not a regular file is never replaced: a character device
    (``/dev/null``), a FIFO with a reader and ``/dev/stdout`` are written in place (a FIFO
    with no reader is refused rather than waited on), and a directory, a block device or a
    socket is refused, each with ``OSError`` whose ``strerror`` says what the path is.

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
    kind = special_kind(path) or ("stream" if _fd_link(path) else None)
    if kind in (*_STREAMS, "stream"):
        with _write_in_place(path, kind or "stream", mode) as stream:
            yield stream
        return
    if kind is not None:
        raise OSError(errno.EINVAL, f"a {kind}, not a regular file")
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

    Only a regular file is read: a FIFO, a device (``/dev/zero``) or a socket is refused
    before anything is read (opened ``O_NONBLOCK``, so a FIFO without a writer cannot block
    the open), and a file of any size after ``limit`` + 1 bytes, so a wrong path can neither
    hang the reader nor make its memory grow without bound.

    Raises:
        OSError: the file cannot be opened or read, or is not a regular file (``EINVAL``,
            its ``strerror`` saying what it is).
        FileTooLargeError: it holds more than ``limit`` bytes.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"a {_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
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


# --- Where the project may write: one owner for the checks on paths -----------------------
#
# A path written or locked is refused when it is a symbolic link (the write would land on its
# target), or when the directory it is created in is owned by another user or writable by
# everyone without the sticky bit (anyone could replace what we make there; /tmp is sticky).
# Whether a directory can take a new file
# is found by trying (create and remove a probe file): permission bits say yes to root even
# where nothing can be created (/proc, a read-only mount).


def _owner_trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def directory_problem(path: str | os.PathLike, private: bool = False) -> str | None:
    """Why files must not be created in the existing directory ``path``, or None.

    Args:
        path: a directory that exists (a symlink to one counts as a symlink).
        private: also refuse a group-writable directory or one owned by root when this user
            is not root (for directories whose content is executed, such as a cache).
    """
    try:
        info = os.lstat(path)
    except OSError as error:
        return f"cannot be examined ({error.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if not _owner_trusted(info.st_uid) or (private and info.st_uid != os.geteuid()):
        return f"is owned by another user (uid {info.st_uid})"
    if private and info.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
        return "is writable by other users"
    # A sticky world-writable directory (/tmp) is where users put outputs: nobody else can
    # remove or rename what we create there, a name someone else took first is refused
    # (their owner, or a symlink), and files are created O_EXCL | O_NOFOLLOW, then renamed.
    if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        return "is world-writable (and not sticky, as /tmp is)"
    return None


def probe_problem(directory: str | os.PathLike) -> str | None:
    """Why a file cannot be created in ``directory`` (tried: a probe file made and removed)."""
    probe = os.path.join(directory, f".popdist-emu-probe.{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as error:
        return f"cannot take a new file ({error.strerror})"
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return None


def output_problem(path: str | os.PathLike, directory: bool) -> str | None:
    """Why ``path`` cannot safely be written (``directory``: a directory to write into, made
    if missing; else a file), or None.

    Refused: ``path`` a symlink, a file where a directory is needed or the reverse, and a
    nearest existing directory (``path`` itself, or the ancestor its missing parts are made
    in) that is unsafe (:func:`directory_problem`) or cannot take a new file (tried).
    """
    full = os.path.abspath(os.fspath(path))
    if os.path.islink(full):
        return f"{full!r} is a symbolic link"
    if os.path.lexists(full) and os.path.isdir(full) != directory:
        return f"{full!r} is {'a file, not a directory' if directory else 'a directory'}"
    existing = full if directory else os.path.dirname(full)
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing!r} is a file, not a directory"
    if os.path.islink(existing) and existing != full:
        existing = os.path.realpath(existing)  # a symlinked ancestor (/var -> /private/var)
    problem = directory_problem(existing) or probe_problem(existing)
    return None if problem is None else f"directory {existing!r} {problem}"


def open_for_appending_lines(path: str | os.PathLike) -> BinaryIO:
    """Opens ``path`` for a stream of output (a log), truncated, unbuffered, never through a
    symlink (``O_NOFOLLOW``: a symlink there is refused with ``ELOOP``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, 0o666), "wb", buffering=0)


def make_directories(path: str | os.PathLike, base: str | os.PathLike) -> None:
    """``os.makedirs(path, exist_ok=True)`` with every part from ``base`` (included) down to
    ``path`` checked once it exists: no symlink, a trusted owner, not world-writable.

    Raises:
        OSError: a part cannot be made, or is unsafe (``EPERM`` naming the part and why).
    """
    top = os.path.abspath(os.fspath(base))
    full = os.path.abspath(os.fspath(path))
    relative = os.path.relpath(full, top)
    parts = [top] + [
        os.path.join(top, *relative.split(os.sep)[: i + 1])
        for i in range(len(relative.split(os.sep)))
        if relative != os.curdir
    ]
    for part in parts:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part)
        problem = directory_problem(part)
        if problem:
            raise PermissionError(errno.EPERM, f"{part!r} {problem}")
