"""What a run is doing, shown by one instance only: named phases, then the steps.

Long phases (compiling a program, above all) are named before they start and reported with
their elapsed seconds when they end (:func:`phase`, through the ``popdist_emu`` logger), so a
job never sits silent. The steps then show as a tqdm bar with the loss, rate and ETA (as the
PopTorch tutorials show) on a terminal, including the launcher's terminal (``poprun-emu``
asks instance 0 for a bar when its own stderr is one); otherwise (logs, CI, pipes) as a plain
line at the first step and every tenth of the run, so output stays readable when
``poprun-emu`` tags and interleaves the instances' lines.

References:
    tqdm documentation, ``tqdm.tqdm`` and ``tqdm.write`` (printing beside an active bar).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from tqdm import tqdm

from contract import InstanceEnvironment

# Runs shorter than this finish before a bar is worth drawing.
MIN_STEPS_FOR_BAR = 50
# Plain-line mode prints about this many lines over a run.
LINES_PER_RUN = 10

LOGGER = logging.getLogger("popdist_emu")


class _TqdmHandler(logging.Handler):
    """Writes log records through ``tqdm.write``, so they never tear an active bar.

    Without a stream of its own it writes to ``sys.stderr`` as it is when the record is
    emitted, not as it was when the handler was made: a replaced stderr (a test's capture, a
    redirect) that has since been closed must not swallow later records.
    """

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(logging.INFO)
        self._stream = stream
        self.setFormatter(logging.Formatter("[popdist-emu] %(message)s"))

    @property
    def stream(self) -> TextIO:
        return sys.stderr if self._stream is None else self._stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = self.stream
            tqdm.write(self.format(record), file=stream)
            stream.flush()
        except Exception:  # logging must never end the run
            self.handleError(record)


_handler: _TqdmHandler | None = None


def show_phases(stream: TextIO | None = None) -> None:
    """Prints this process's phase messages (:func:`phase`) to ``stream`` (stderr)."""
    global _handler
    if _handler is not None:
        LOGGER.removeHandler(_handler)
    _handler = _TqdmHandler(stream)
    LOGGER.addHandler(_handler)
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


@contextlib.contextmanager
def phase(doing: str, done: str | None = None, *, every: float = 30.0) -> Iterator[None]:
    """Names a long phase before it starts and reports its seconds when it ends.

    Logs ``"<doing> ..."``, then ``"<done> in <s> s"`` at INFO on the ``popdist_emu`` logger,
    which :func:`show_phases` (or a :class:`Progress`) prints on instance 0; a phase that
    lasts longer says ``"<doing>: <s> s so far"`` every ``every`` seconds, so a long compile
    is never silent.

    Args:
        doing: what starts, e.g. ``"compiling micro_step"``.
        done: what ended, e.g. ``"compiled micro_step"``; default ``doing``.
        every: seconds between the "so far" lines.
    """
    LOGGER.info("%s ...", doing)
    start = time.perf_counter()
    finished = threading.Event()

    def heartbeat() -> None:
        while not finished.wait(every):
            LOGGER.info("%s: %.0f s so far", doing, time.perf_counter() - start)

    watcher = None
    if LOGGER.isEnabledFor(logging.INFO) and LOGGER.handlers:
        watcher = threading.Thread(target=heartbeat, name="popdist-emu-phase", daemon=True)
        watcher.start()
    try:
        yield
    finally:
        finished.set()
        if watcher is not None:
            watcher.join()
    LOGGER.info("%s in %.1f s", done or doing, time.perf_counter() - start)


class Progress:
    """A progress display of ``total_steps`` optimiser steps; also shows the named phases.

    Args:
        total_steps: steps the run will take.
        enabled: whether this process shows anything (pass ``instance == 0``).
        stream: where to write; stderr by default, keeping stdout for results.
        bar: force the tqdm bar on or off; None draws it on a terminal (this process's, or
            the launcher's when ``poprun-emu`` asks for it) for a run long enough to watch.
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
            terminal = isatty() or InstanceEnvironment.from_environ().progress
            bar = terminal and total_steps >= MIN_STEPS_FOR_BAR
        self.every = max(1, total_steps // LINES_PER_RUN)
        self.use_bar = bool(enabled and bar)
        self._bar: tqdm | None = None
        if enabled:
            show_phases(stream)  # None: stderr as it is when a phase is logged

    def update(self, step: int, loss: float) -> None:
        """Reports that ``step`` steps are done (1-based count) with the latest ``loss``."""
        if not self.enabled:
            return
        if self.use_bar:
            if self._bar is None:  # drawn at the first step, after the phase messages
                self._bar = tqdm(total=self.total_steps, file=self.stream, unit="step")
            self._bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            self._bar.update(step - self._bar.n)
        elif step == 1 or step % self.every == 0 or step == self.total_steps:
            print(f"step {step}/{self.total_steps} loss {loss:.4f}", file=self.stream, flush=True)

    def close(self) -> None:
        """Ends the bar (if any)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
