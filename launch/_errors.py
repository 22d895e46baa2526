"""The launcher's errors before its job starts: a refused command line (exit code 2) and an
interruption (exit code ``128 + signal``)."""


class UsageError(ValueError):
    """A command line ``poprun-emu`` refuses; the message names the value and the fix."""


class InterruptError(Exception):
    """The launcher got Ctrl-C, SIGTERM or SIGHUP before its job started and ended what it
    had started; ``signum`` is the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
