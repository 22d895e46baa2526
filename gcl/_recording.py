"""What gcl executed: every completed collective as a ``hardware.CollectiveRecord``.

The runtime's reduce-and-update stages record, from shapes, the collectives a step runs, and
the hardware model prices those records. :func:`recording` lets a program (or a test) see the
collectives gcl actually ran in this process, with the method gcl resolved, so the two can be
compared record for record.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from gcl._groups import All, Consecutive, Group, Orthogonal
from hardware import CollectiveRecord

_lock = threading.Lock()
_recorders: list[list[CollectiveRecord]] = []
# (record, started, finished) in ``time.perf_counter`` seconds, for a host timeline.
_timed: list[list[tuple[CollectiveRecord, float, float]]] = []


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


@contextlib.contextmanager
def timed_recording() -> Iterator[list[tuple[CollectiveRecord, float, float]]]:
    """As :func:`recording`, each record with when the collective started and finished
    (``time.perf_counter`` seconds): what a host timeline of the run shows."""
    records: list[tuple[CollectiveRecord, float, float]] = []
    with _lock:
        _timed.append(records)
    try:
        yield records
    finally:
        with _lock:
            _timed.remove(records)


def record(kind: str, method: str, group: Group, nbytes: int, started: float | None = None) -> None:
    """Notes one completed collective for the active :func:`recording` and
    :func:`timed_recording` blocks (if any); ``started`` is when it began."""
    if not (_recorders or _timed):
        return
    entry = CollectiveRecord(kind, method, group_name(group), int(nbytes))
    finished = time.perf_counter()
    with _lock:
        for records in _recorders:
            records.append(entry)
        for timed in _timed:
            timed.append((entry, finished if started is None else started, finished))
