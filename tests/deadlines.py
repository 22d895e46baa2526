"""Every deadline a test sets, derived from one scale factor.

A deadline in a test bounds a hang; it must not fail a test that is merely slow because the
machine is busy (CI's two cores, a laptop beside a build, the suite beside eight CPU burners).
So every timeout a test gives a subprocess, a wait or the emulator, and every "ended within"
bound it asserts, is a base figure measured on an idle 2-core machine times one factor:

- ``TEST_DEADLINE_SCALE`` (a decimal number at least 1) where CI or a person sets it, and
- the machine's load per CPU at the moment the deadline is set (the 1-minute load average
  divided by the CPUs this process may run on), when that is larger,

whichever is larger. pytest-timeout's per-test limits are scaled by the same factor
(``tests/conftest.py``).

References:
    Linux ``proc(5)``, ``/proc/loadavg``: the load average counts runnable and
    uninterruptible tasks; Python documentation, ``os.getloadavg`` and
    ``os.sched_getaffinity``.
"""

from __future__ import annotations

import os

VARIABLE = "TEST_DEADLINE_SCALE"


def _configured() -> float:
    """The factor the environment sets (at least 1); one line naming a bad value."""
    text = os.environ.get(VARIABLE, "").strip()
    if not text:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{VARIABLE}={text!r}: give a number of at least 1, e.g. 2") from None
    if not value >= 1.0:
        raise ValueError(f"{VARIABLE}={text!r}: give a number of at least 1, e.g. 2")
    return value


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def scale() -> float:
    """The factor every deadline is multiplied by now: the configured one, or the load per
    CPU when the machine is busier than that."""
    return max(_configured(), os.getloadavg()[0] / _cpus())


def within(seconds: float) -> float:
    """``seconds`` (a deadline measured on an idle machine) scaled for this one now."""
    return seconds * scale()
