"""This machine's memory, as the launcher and the instances both size things by it.

JAX-free and read at the moment of asking (memory comes and goes with other work).

References:
    Linux ``proc(5)``, ``/proc/meminfo`` (``MemTotal``, ``MemAvailable``, in kB);
    POSIX ``sysconf`` (``SC_PHYS_PAGES``, ``SC_AVPHYS_PAGES``, ``SC_PAGE_SIZE``).
"""

from __future__ import annotations

import os


def _meminfo_bytes(field: str) -> int | None:
    """``field`` of ``/proc/meminfo`` in bytes, None where the file or the field is missing."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def total_memory_bytes() -> int | None:
    """The machine's whole memory (``MemTotal``); None where ``/proc/meminfo`` says nothing."""
    return _meminfo_bytes("MemTotal")


def available_memory_bytes() -> int:
    """Bytes this machine can still give a process (``MemAvailable``, else the free pages)."""
    available = _meminfo_bytes("MemAvailable")
    if available is not None:
        return available
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
