"""What each instance's host really did during the run, for the trace beside the simulation.

The simulated IPU timeline says what a POD would do; the host track says what this run did:
each instance's compiles, each call's host time (a ``Trainer.step``), and the collectives as
gcl ran them (kind, method, group, bytes), with wall-clock times, so Perfetto shows them
instance beside instance (PopVision's System Analyser shows the host this way).

Each instance keeps its spans in memory (the first ``MAX_SPANS``); at report time every
instance but 0 writes them to the launcher's job directory (renamed into place) and
instance 0 collects them, waiting a bounded time for instances that have not written yet.

References:
    Graphcore, PopVision System Analyser User Guide (the host's timeline of a run).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import TypedDict

from contract import pid_file_instances, write_atomically

MAX_SPANS = 5000  # per instance: a long run's first calls say what its steps look like
WAIT_SECONDS = 5.0  # how long instance 0 waits for the others' timelines


class HostSpan(TypedDict):
    """One span of a host timeline, as kept and as written to JSON."""

    name: str
    start: float  # epoch seconds
    seconds: float
    args: dict[str, object]  # the caller's keywords (step, collective, ...)


class HostTimeline:
    """One process's host spans: ``(name, start, seconds, args)``, start in epoch seconds
    (``time.time``) so that the instances of a machine share one clock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[HostSpan] = []
        self.dropped = 0
        # perf_counter -> epoch: one offset, taken once (perf_counter is monotonic).
        self._epoch = time.time() - time.perf_counter()

    def add(self, name: str, started: float, finished: float, **args: object) -> None:
        """A span from ``time.perf_counter`` readings."""
        span: HostSpan = {
            "name": name,
            "start": self._epoch + started,
            "seconds": max(finished - started, 0.0),
            "args": args,
        }
        with self._lock:
            if len(self._spans) < MAX_SPANS:
                self._spans.append(span)
            else:
                self.dropped += 1

    @contextlib.contextmanager
    def span(self, name: str, **args: object) -> Iterator[None]:
        """Records the ``with`` block as a span called ``name``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, started, time.perf_counter(), **args)

    def spans(self) -> list[HostSpan]:
        """A copy of the spans so far."""
        with self._lock:
            return list(self._spans)


# The process's timeline: one process is one instance.
TIMELINE = HostTimeline()


def _path(job_dir: str, instance: int) -> str:
    return os.path.join(job_dir, f"host-timeline-{instance}.json")


def publish(job_dir: str, instance: int) -> None:
    """Leaves this instance's spans in the job directory for instance 0 (no-op without a
    launcher's job directory)."""
    if job_dir and os.path.isdir(job_dir):
        data = {"spans": TIMELINE.spans(), "dropped": TIMELINE.dropped}
        write_atomically(_path(job_dir, instance), json.dumps(data))


def collect(
    job_dir: str, instance: int, wait_seconds: float = WAIT_SECONDS
) -> tuple[dict[int, list[HostSpan]], list[int]]:
    """This instance's spans and those the other started instances left, waiting at most
    ``wait_seconds`` for them.

    Returns:
        ``(spans by instance, instances whose timeline did not arrive in time)``.
    """
    out: dict[int, list[HostSpan]] = {instance: TIMELINE.spans()}
    others = [i for i in pid_file_instances(job_dir) if i != instance] if job_dir else []
    deadline = time.monotonic() + wait_seconds
    missing = list(others)
    while missing:
        for i in list(missing):
            with contextlib.suppress(OSError, ValueError):
                with open(_path(job_dir, i)) as f:
                    out[i] = json.load(f)["spans"]
                missing.remove(i)
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return dict(sorted(out.items())), missing
