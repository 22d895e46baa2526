"""Progress of a training run, shown by one instance only.

On a terminal and a run long enough to watch, a tqdm bar with the loss (as the PopTorch
tutorials show); otherwise (logs, CI, short runs) a plain line every few steps, so output
stays readable when ``poprun-emu`` tags and interleaves the instances' lines.
"""

from __future__ import annotations

import sys
from typing import TextIO

# Runs shorter than this finish before a bar is worth drawing.
MIN_STEPS_FOR_BAR = 50
# Plain-line mode prints about this many lines over a run.
LINES_PER_RUN = 10


class Progress:
    """A progress display of ``total_steps`` optimiser steps.

    Args:
        total_steps: steps the run will take.
        enabled: whether this process shows anything (pass ``instance == 0``).
        stream: where to write; stderr by default, keeping stdout for results.
        bar: force the tqdm bar on or off; None picks it for a tty and a long run.
    """

    def __init__(
        self,
        total_steps: int,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        bar: bool | None = None,
    ) -> None:
        self.total_steps = total_steps
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        if bar is None:
            isatty = getattr(self.stream, "isatty", lambda: False)
            bar = isatty() and total_steps >= MIN_STEPS_FOR_BAR
        self.every = max(1, total_steps // LINES_PER_RUN)
        self._bar = None
        if enabled and bar:
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, file=self.stream, unit="step", leave=True)

    def update(self, step: int, loss: float) -> None:
        """Reports that ``step`` steps are done (1-based count) with the latest ``loss``."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            self._bar.update(step - self._bar.n)
        elif step % self.every == 0 or step == self.total_steps:
            print(f"step {step}/{self.total_steps} loss {loss:.4f}", file=self.stream, flush=True)

    def close(self) -> None:
        """Ends the bar (if any)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
