"""One compiler per program at a time across the instances of a machine.

Every instance of a job compiles the same programs at the same moment. With JAX's persistent
compilation cache on (``poprun-emu`` turns it on), the first instance to take a program's lock
compiles it and writes the cache; the others wait and then load it from the cache instead of
compiling it again, so a cold start costs one compilation per program instead of one per
instance. The lock is an advisory ``flock`` on a file in the cache directory, released when
its holder ends (even when it dies); the wait is bounded, after which an instance compiles on
its own.

References:
    JAX documentation, "Persistent compilation cache"; POSIX ``flock(2)`` (Linux man page).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator

import jax

# Longest wait for another instance's compile before compiling anyway.
MAX_WAIT_SECONDS = 300.0
_POLL_SECONDS = 0.05


def _cache_dir() -> str | None:
    """JAX's persistent compilation cache directory, or None when it is off."""
    # ``values`` is the typed way to read a flag (attribute access is dynamic).
    return jax.config.values.get("jax_compilation_cache_dir") or None


@contextlib.contextmanager
def compile_lock(key: str, *, max_wait: float = MAX_WAIT_SECONDS) -> Iterator[bool]:
    """Holds the machine-wide lock of the program ``key`` while it is compiled.

    Does nothing without a persistent compilation cache (there is nothing to share).

    Yields:
        Whether the lock is held (False: no cache, the lock file cannot be opened, or the
        wait timed out).
    """
    directory = _cache_dir()
    if directory is None:
        yield False
        return
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    try:
        handle = open(os.path.join(directory, f".popdist-emu-{digest}.lock"), "a+")  # noqa: SIM115
    except OSError:
        yield False
        return
    held = False
    deadline = time.monotonic() + max_wait
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(_POLL_SECONDS)
        yield held
    finally:
        if held:
            fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
