"""The executable cache: JAX's persistent compilation cache, on by default, per user.

PopRun's ``--executable-cache-path`` lets Poplar reuse compiled executables across runs; the
emulator's counterpart is JAX's persistent compilation cache, so a second identical run skips
XLA compilation. Without the option the cache lives in a per-user directory,
``$XDG_CACHE_HOME/popdist-emu/jax`` (``~/.cache/popdist-emu/jax``), created private (0700).

Loading a compiled executable runs its code, so the cache must be the user's own: a symlink,
a directory owned by someone else, or one writable by others (``/tmp`` itself, say, even as
root) is refused, since anyone could plant executables, or symlinks where JAX writes its lock
files, there (popdist_emu._files.directory_problem, private).

References:
    PopRun/PopDist User Guide, ``--executable-cache-path``; JAX documentation, "Persistent
    compilation cache" (``jax_compilation_cache_dir``,
    https://docs.jax.dev/en/latest/persistent_compilation_cache.html); XDG Base Directory
    Specification (``XDG_CACHE_HOME``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from contract import directory_problem, probe_problem
from launch._errors import UsageError


def default_cache_dir(environ: Mapping[str, str]) -> str:
    """``$XDG_CACHE_HOME/popdist-emu/jax``, or ``~/.cache/popdist-emu/jax``."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "popdist-emu", "jax")


def executable_cache_dir(requested: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The cache directory for this job, created if missing and checked to be the user's.

    Args:
        requested: ``--executable-cache-path``; empty or None takes the per-user default.
        environ: the launcher's environment (default ``os.environ``).

    Raises:
        UsageError: the directory cannot be created, is not a directory, or is
            world-writable and owned by another user.
    """
    environ = os.environ if environ is None else environ
    option = "--executable-cache-path"
    path = os.path.abspath(os.path.expanduser(requested or default_cache_dir(environ)))
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError as error:
        raise UsageError(
            f"{option} {path}: cannot create the cache directory ({error.strerror}); pass a "
            f"directory you can write, e.g. {option} ~/.cache/popdist-emu/jax."
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{option} {path} is not a directory; pass a directory.")
    problem = directory_problem(path, private=True) or probe_problem(path)
    if problem:
        raise UsageError(
            f"{option} {path} {problem}: compiled code loaded from it runs here; pass a "
            f"directory only you can write, e.g. {option} ~/.cache/popdist-emu/jax."
        )
    return path
