"""Hides MPICH's termination banner from mpiexec's output: the launcher explains the failure.

When a process of a job ends badly, MPICH's Hydra prints a ten-line banner ("BAD TERMINATION
OF ONE OF YOUR APPLICATION PROCESSES ... YOU CAN IGNORE THE BELOW CLEANUP MESSAGES", then "YOUR
APPLICATION TERMINATED WITH THE EXIT STRING ...") before the launcher's one line naming the
instance and its code. The launcher's watchdog explains every such failure, so the banner only
buries it; ``-v`` keeps it. Everything else passes through unchanged and at once: a partial
line (a progress bar redrawn with ``\\r``) is not held back, only a line that may open the
banner (blank, or all ``=``) until the next line shows whether it does.

References:
    MPICH Hydra (``src/pm/hydra``), the banner ``mpiexec`` prints when a process exits badly.
"""

from __future__ import annotations

import re

_SEPARATOR = re.compile(rb"=+\s*")  # a line of "=", its end of line included
BANNER_START = b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
BANNER_END = b"Please see the FAQ page for debugging suggestions"


class BannerFilter:
    """A byte-stream filter: ``feed`` returns what to write now, ``flush`` the rest at EOF."""

    def __init__(self) -> None:
        self._pending = b""  # the current line, not yet decided
        self._held: list[bytes] = []  # blank and separator lines that may open the banner
        self._dropping = False
        self._midline = False  # the current line's start was already passed through

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
            if not self._pending.startswith(b"="):  # cannot open the banner: pass it on now
                out.append(self._pending)
                self._pending = b""
                self._midline = True
        elif self._pending and self._midline:
            out.append(self._pending)
            self._pending = b""
        return b"".join(out)

    def flush(self) -> bytes:
        """The bytes still held at the end of the stream (never a banner's)."""
        rest = b"" if self._dropping else b"".join(self._held) + self._pending
        self._held, self._pending = [], b""
        return rest

    def _line(self, line: bytes) -> bytes:
        if self._dropping:
            if line.startswith(BANNER_END):
                self._dropping = False
            return b""
        if not line.strip() or _SEPARATOR.fullmatch(line):
            self._held.append(line)
            return b""
        held, self._held = self._held, []
        if line.startswith(BANNER_START) and held and _SEPARATOR.fullmatch(held[-1]):
            # The banner opens with a blank line and a separator; what came before stays.
            keep = len(held) - 1
            if keep and not held[keep - 1].strip():
                keep -= 1
            self._dropping = True
            return b"".join(held[:keep])
        return b"".join(held) + line
