"""Hides the MPI's termination notices from mpiexec's output: the launcher explains the failure.

When a process of a job ends badly, MPICH's Hydra prints a ten-line banner ("BAD TERMINATION
OF ONE OF YOUR APPLICATION PROCESSES ... YOU CAN IGNORE THE BELOW CLEANUP MESSAGES", then "YOUR
APPLICATION TERMINATED WITH THE EXIT STRING ...") and Open MPI's prterun a block between dashed
lines ("prterun detected that one or more processes exited with non-zero status ..."), before
the launcher's one line naming the instance and its code. The launcher's watchdog explains
every such failure, so the notice only buries it; ``-v`` keeps it, and the launcher prints the
hidden notices when it could not explain the end itself. Everything else passes through
unchanged and at once: a partial line (a progress bar redrawn with ``\\r``) is not held back,
only a line that may open a notice (blank, or all ``=`` or ``-``) until the next line shows
whether it does.

References:
    MPICH Hydra (``src/pm/hydra``), the banner ``mpiexec`` prints when a process exits badly;
    Open MPI 5 / PRRTE help text ``help-prterun.txt`` ("prterun detected that one or more
    processes exited with non-zero status").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_EQUALS = re.compile(rb"=+\s*")  # a line of "=", its end of line included
_DASHES = re.compile(rb"-{10,}\s*")  # Open MPI's help-text rule
BANNER_START = b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
BANNER_END = b"Please see the FAQ page for debugging suggestions"
OPENMPI_STARTS = (
    b"prterun detected that one or more processes exited with non-zero status",
    b"mpirun detected that one or more processes exited with non-zero status",
    b"prterun noticed that process rank",
    b"mpirun noticed that process rank",
    b"Primary job  terminated normally, but",
)


# Open MPI's notice names the first process that failed by its rank (the instance).
# MPICH's banner names no rank, and the pid it gives is not the failed process's (seen
# here: the first local rank's bootstrap, whichever rank was killed).
_OPENMPI_RANK = re.compile(
    rb"(?:noticed that process rank (\d+) with PID|Process name: \[[^\]]*,(\d+)\])"
)


def first_ended(hidden: Iterable[bytes]) -> int | None:
    """The rank Open MPI's notice says ended first (the instance); None when no notice
    names one (MPICH's never does). The MPI saw that end before it ended the others, which
    no scheduling of theirs can reorder."""
    for line in hidden:
        if m := _OPENMPI_RANK.search(line):
            return int(m[1] or m[2])
    return None


class BannerFilter:
    """A byte-stream filter: ``feed`` returns what to write now, ``flush`` the rest at EOF;
    ``hidden`` keeps what it held back, for when the launcher cannot explain the end."""

    def __init__(self) -> None:
        self._pending = b""  # the current line, not yet decided
        self._held: list[bytes] = []  # blank and rule lines that may open a notice
        self._dropping: re.Pattern[bytes] | bytes | None = None  # what ends the notice
        self._midline = False  # the current line's start was already passed through
        self.hidden: list[bytes] = []

    def feed(self, data: bytes) -> bytes:
        """Takes the next bytes of the stream; returns the bytes to write now."""
        out: list[bytes] = []
        self._pending += data
        while (end := self._pending.find(b"\n")) >= 0:
            line, self._pending = self._pending[: end + 1], self._pending[end + 1 :]
            if self._midline:
                out.append(line)  # the rest of a line whose start already went through
                self._midline = False
            else:
                out.append(self._line(line))
        if self._pending and not (self._dropping or self._held or self._midline):
            if not self._pending.startswith((b"=", b"-")):  # cannot open a notice: pass it on
                out.append(self._pending)
                self._pending = b""
                self._midline = True
        elif self._pending and self._midline:
            out.append(self._pending)
            self._pending = b""
        return b"".join(out)

    def flush(self) -> bytes:
        """The bytes still held at the end of the stream (never a notice's)."""
        rest = b"" if self._dropping else b"".join(self._held) + self._pending
        self._held, self._pending = [], b""
        return rest

    def _line(self, line: bytes) -> bytes:
        if self._dropping is not None:
            self.hidden.append(line)
            until = self._dropping
            if line.startswith(until) if isinstance(until, bytes) else until.fullmatch(line):
                self._dropping = None
            return b""
        if not line.strip() or _EQUALS.fullmatch(line) or _DASHES.fullmatch(line):
            self._held.append(line)
            return b""
        held, self._held = self._held, []
        rule = held[-1] if held else b""
        ends: re.Pattern[bytes] | bytes | None = None
        if line.startswith(BANNER_START) and _EQUALS.fullmatch(rule):
            ends = BANNER_END
        elif line.startswith(OPENMPI_STARTS) and _DASHES.fullmatch(rule):
            ends = _DASHES
        if ends is None:
            return b"".join(held) + line
        # The notice opens with its rule (and MPICH's with a blank line before it); what
        # came before stays.
        keep = len(held) - 1
        if ends == BANNER_END and keep and not held[keep - 1].strip():
            keep -= 1
        self._dropping = ends
        self.hidden += [*held[keep:], line]
        return b"".join(held[:keep])
