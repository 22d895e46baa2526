"""``poprun-emu --calibrate-from FILE``: the job's parameters refitted to measured runs.

The refit runs in its own process before the job (``contract.refit_calibration``, which
starts ``python -m popdist_emu.calibration``): the launcher imports only ``contract`` and
starts without JAX or SciPy. That process refuses a bad file in one line before anything
runs (reported here as a ``UsageError``, exit 2), probes the program once offline, refits the
terms the measurements constrain and writes the refitted calibration file; the launcher
prints what changed and the job runs with the file (``contract.ENV_CALIBRATION_FILE``).
"""

from __future__ import annotations

import sys
import tempfile

from contract import RefitError, refit_calibration
from launch._errors import UsageError
from launch._options import LaunchOptions


def refit(options: LaunchOptions, folder: str) -> dict[str, str]:
    """Refits to ``options.calibrate_from``, prints what changed; returns the variable that
    points the job at the refitted file in ``folder``.

    Raises:
        UsageError: a bad file of measurements, or a probe run that failed.
    """
    try:
        env, lines = refit_calibration(
            options.calibrate_from, options.program, options.system, folder
        )
    except RefitError as error:
        raise UsageError(str(error)) from None
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return env


def temporary_folder() -> str:
    """A private folder for the probe's request and the refitted file."""
    return tempfile.mkdtemp(prefix="poprun-emu-calibrate-")
