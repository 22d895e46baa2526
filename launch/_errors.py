"""The launcher's usage error: a refusal before anything starts (exit code 2)."""


class UsageError(ValueError):
    """A command line ``poprun-emu`` refuses; the message names the value and the fix."""
