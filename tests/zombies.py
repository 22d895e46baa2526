"""A real zombie for the tests of what counts as alive: a child that has exited and that its
parent (the test) has not reaped. ``kill(pid, 0)`` still succeeds on it; ``/proc`` shows it
in state Z.

References:
    Linux ``proc(5)``, ``/proc/<pid>/stat``: "Z  Zombie".
"""

import subprocess
import sys
import time

from deadlines import within

from contract import stat_fields


def until_zombie(child: subprocess.Popen) -> subprocess.Popen:
    """``child`` once it has exited (ended or killed) and waits to be reaped."""
    deadline = time.monotonic() + within(30)
    while (stat_fields(child.pid) or ["?"])[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (stat_fields(child.pid) or ["?"])[0] == "Z", "the child never became a zombie"
    return child


def zombie() -> subprocess.Popen:
    """A child that has exited and is not reaped; the caller reaps it (``wait()``)."""
    return until_zombie(subprocess.Popen([sys.executable, "-c", "pass"]))
