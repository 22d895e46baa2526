"""Children of signal tests start with the signal's default disposition and unblocked.

A shell runs a background job (``pytest ... &``) with SIGINT ignored, and an ignored
disposition is inherited across exec: Python then installs no KeyboardInterrupt handler, and a
test that sends SIGINT to its child waits in vain. A test that sends a signal therefore sets
its child's disposition and mask for that signal itself (``preexec_fn``), so the suite holds
wherever it is started.

References:
    POSIX ``sigaction``/``exec``: ignored signals stay ignored in the new image; Python
    documentation, ``signal``: SIGINT becomes KeyboardInterrupt "if the parent process has
    not changed it".
"""

import signal
from collections.abc import Callable


def default_signals(*signums: int) -> Callable[[], None]:
    """A ``preexec_fn`` giving ``signums`` their default disposition, unblocked."""

    def reset() -> None:
        for signum in signums:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, signums)

    return reset
