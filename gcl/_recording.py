"""What gcl executed: every completed collective as a ``hardware.CollectiveRecord``.

The runtime's reduce-and-update stages record, from shapes, the collectives a step runs, and
the hardware model prices those records. :func:`recording` lets a program (or a test) see the
collectives gcl actually ran in this process, with the method gcl resolved, so the two can be
compared record for record.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from gcl._groups import All, Consecutive, Group, Orthogonal
from hardware import CollectiveRecord

_lock = threading.Lock()
_recorders: list[list[CollectiveRecord]] = []


def group_name(group: Group) -> str:
    """A group as ``CollectiveRecord.group`` spells it: ``all``, ``consecutive(k)`` or
    ``orthogonal(k)``."""
    if isinstance(group, Consecutive):
        return f"consecutive({group.k})"
    if isinstance(group, Orthogonal):
        return f"orthogonal({group.k})"
    if isinstance(group, All):
        return "all"
    raise TypeError(f"not a gcl group: {group!r}")


@contextlib.contextmanager
def recording() -> Iterator[list[CollectiveRecord]]:
    """Collects every collective this process completes inside the ``with`` block.

    Yields:
        A list that fills with one ``hardware.CollectiveRecord`` per completed collective
        (kind, the method gcl ran, group, bytes as the record defines them), in order.
    """
    records: list[CollectiveRecord] = []
    with _lock:
        _recorders.append(records)
    try:
        yield records
    finally:
        with _lock:
            _recorders.remove(records)


def record(kind: str, method: str, group: Group, nbytes: int) -> None:
    """Notes one completed collective for the active :func:`recording` blocks (if any)."""
    if not _recorders:
        return
    entry = CollectiveRecord(kind, method, group_name(group), int(nbytes))
    with _lock:
        for records in _recorders:
            records.append(entry)
