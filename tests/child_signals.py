"""Children of signal tests start with the signal's default disposition and unblocked.

A shell runs a background job (``pytest ... &``) with SIGINT ignored, and an ignored
disposition is inherited across exec: Python then installs no KeyboardInterrupt handler, and a
test that sends SIGINT to its child waits in vain. A test that sends a signal therefore sets
its child's disposition and mask for that signal itself, so the suite holds wherever it is
started: a small Python sets them and execs the child's command in its place (same pid). An
exec keeps them; a ``preexec_fn`` would fork the test's own process, where JAX runs threads.

References:
    POSIX ``sigaction``/``exec``: ignored signals stay ignored in the new image; Python
    documentation, ``signal``: SIGINT becomes KeyboardInterrupt "if the parent process has
    not changed it"; ``subprocess.Popen``: ``preexec_fn`` "is not safe to use in the presence
    of threads".
"""

import signal
import sys
from collections.abc import Sequence

_RESET_AND_EXEC = (
    "import os, signal, sys\n"
    "signums = [int(s) for s in sys.argv[1].split(',')]\n"
    "for signum in signums:\n"
    "    signal.signal(signum, signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, signums)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def with_default_signals(command: Sequence[str], *signums: int) -> list[str]:
    """``command`` run with ``signums`` at their default disposition, unblocked."""
    numbers = ",".join(str(int(signal.Signals(s))) for s in signums)
    return [sys.executable, "-c", _RESET_AND_EXEC, numbers, *command]
