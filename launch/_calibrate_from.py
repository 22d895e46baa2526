"""``poprun-emu --calibrate-from FILE``: the job's parameters refitted to measured runs.

The file (one JSON object a line: a configuration and its measured samples/s,
``popdist_emu.calibration.read_measurements``) is checked before anything starts, a bad one
refused in one line (exit 2); then ``popdist_emu.calibration.refit_program`` probes the
program once offline, refits the terms the measurements constrain, and the job runs with the
refitted calibration file. The emulator's calibration is imported only when the option is
given (SciPy is slow to import).
"""

from __future__ import annotations

import sys
import tempfile

from launch._errors import UsageError
from launch._options import LaunchOptions


def check(path: str) -> None:
    """Refuses a bad measurements file with a ``UsageError`` of one line."""
    from popdist_emu.calibration import MeasurementError, read_measurements

    try:
        read_measurements(path)
    except MeasurementError as error:
        raise UsageError(str(error)) from None


def refit(options: LaunchOptions, folder: str) -> dict[str, str]:
    """Refits to ``options.calibrate_from``, prints what changed; returns the variable that
    points the job at the refitted file in ``folder``.

    Raises:
        UsageError: the probe run failed, or a configuration it refused.
    """
    from popdist_emu.calibration import MeasurementError, refit_program

    try:
        env, lines = refit_program(options.calibrate_from, options.program, options.system, folder)
    except MeasurementError as error:
        raise UsageError(str(error)) from None
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return env


def temporary_folder() -> str:
    """A private folder for the probe's request and the refitted file."""
    return tempfile.mkdtemp(prefix="poprun-emu-calibrate-")
