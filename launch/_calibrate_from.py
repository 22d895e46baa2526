"""``poprun-emu --calibrate-from FILE``: the job's parameters refitted to measured runs.

The refit runs in its own process before the job (``contract.refit_calibration``, which
starts ``python -m popdist_emu.calibration``, bounds the wait and owns the refitted file's
folder): the launcher imports only ``contract`` and starts without JAX or SciPy. That process
refuses a bad file in one line before anything runs (reported here as a ``UsageError``,
exit 2), probes the program once offline, refits the terms the measurements constrain and
writes the refitted calibration file; the launcher prints what changed and the job runs with
the file (``contract.ENV_CALIBRATION_FILE``), which is removed when the job ends.

Ctrl-C, SIGTERM or SIGHUP during the refit end it (its whole session) and remove its folder,
and the launcher exits in one line with ``128 + signal``, as it does during the job: the
job's watchdog handles these signals only once the job starts, and without a handler
SIGTERM or SIGHUP would end the launcher alone and leave the refit running.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from contract import RefitError, ending_signals_interrupt, interrupt_signal, refit_calibration
from launch._errors import InterruptError, UsageError
from launch._options import LaunchOptions


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP raise as Ctrl-C does while the refit runs, so that the refit's
    context ends its session and removes its folder; any of them leaves as ``InterruptError``."""
    with ending_signals_interrupt():
        try:
            yield
        except KeyboardInterrupt as stop:
            raise InterruptError(interrupt_signal(stop)) from None


@contextlib.contextmanager
def refitted(options: LaunchOptions) -> Iterator[dict[str, str]]:
    """Refits to ``options.calibrate_from`` and prints what changed; yields, while the job
    runs, the variable that points it at the refitted file.

    Raises:
        UsageError: a bad file of measurements, a probe run that failed, or a refit that ran
            past its bound (``contract.REFIT_TIMEOUT_S``).
        InterruptError: Ctrl-C, SIGTERM or SIGHUP while the refit ran (it was ended).
    """
    with contextlib.ExitStack() as stack:
        try:
            with _interruptible():
                env, lines = stack.enter_context(
                    refit_calibration(options.calibrate_from, options.program, options.system)
                )
        except RefitError as error:
            raise UsageError(str(error)) from None
        for line in lines:
            print(line, file=sys.stderr, flush=True)
        yield env
