"""``--calibrate-from``, the launchers' side: the refit runs in its own process.

``poprun-emu`` and ``poprun-emu-scaling`` both refit the hardware model to a user's measured
runs before the job; the refit compiles the program and fits with SciPy, which the launcher
(JAX-free, importing only ``contract``) must not import. So they start
``python -m popdist_emu.calibration`` (``popdist_emu/calibration/_cli.py``), which checks the
file, probes the program, writes the refitted calibration file and prints what changed; the
job then reads that file (:data:`contract.ENV_CALIBRATION_FILE`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from contract._environment import ENV_CALIBRATION_FILE


class RefitError(ValueError):
    """The refit refused the measurements or its probe run failed; the message is one line
    naming the file, the line and the fix."""


def refit_calibration(
    path: str, program: Sequence[str], system: str, folder: str
) -> tuple[dict[str, str], list[str]]:
    """Refits to the measured runs of ``path`` for ``program``; the refitted file is written
    into ``folder``.

    Args:
        path: the ``--calibrate-from`` file.
        program: the program and its arguments, as the launcher runs them.
        system: the job's ``--system`` ("" for the smallest POD that holds it).
        folder: a private folder for the refit's files.

    Returns:
        The variable that points a job at the refitted file, and the lines to print.

    Raises:
        RefitError: a bad file of measurements or a failed probe run (one line).
    """
    out = os.path.join(folder, "calibration.json")
    command = [
        sys.executable, "-m", "popdist_emu.calibration", "--calibrate-from", path,
        "--system", system, "--out", out, "--", *program,
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    if run.returncode != 0 or not os.path.exists(out):
        last = run.stderr.strip().splitlines()[-1:] or [f"the refit exited with {run.returncode}"]
        raise RefitError(last[0])
    return {ENV_CALIBRATION_FILE: out}, run.stdout.splitlines()
