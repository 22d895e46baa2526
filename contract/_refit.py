"""``--calibrate-from``, the launchers' side: the refit runs in its own process, bounded.

``poprun-emu`` and ``poprun-emu-scaling`` both refit the hardware model to a user's measured
runs before the job; the refit compiles the program and fits with SciPy, which the launcher
(JAX-free, importing only ``contract``) must not import. So they start
``python -m popdist_emu.calibration`` (``popdist_emu/calibration/_cli.py``), which checks the
file, probes the program, writes the refitted calibration file and prints what changed; the
job then reads that file (:data:`contract.ENV_CALIBRATION_FILE`).

:func:`refit_calibration` owns all of it: the refit's private folder (made for it, removed
when the job that reads the file ends, also on a failure) and the wait, which is bounded as
every wait on another process is: past its bound the refit is ended with everything it
started (its own session's process group: the probe's ``poprun-emu`` ends its job on
SIGTERM) and the launcher stops with one line.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence

from contract._environment import ENV_CALIBRATION_FILE
from contract._processes import end_process_group, start_session

REFIT_TIMEOUT_S = 1800.0
"""How long ``poprun-emu``'s refit may run, in seconds: it has no option that bounds a compile
(``poprun-emu-scaling`` passes its ``--timeout`` instead). The refit compiles the program
once, offline, and simulates a step per measured configuration and probe, as one series of
``poprun-emu-scaling`` does, and gets that series' default bound: half an hour holds a compile
of the largest programs on a loaded CPU, so a refit still running then is a program that does
not end offline (a loop, a wait for input), not a slow one."""

STOP_GRACE_S = 30.0
"""How long the refit's processes have to end on SIGTERM before SIGKILL: the probe's
``poprun-emu`` ends its job's instances first (SIGTERM, then SIGKILL after its own grace)."""


class RefitError(ValueError):
    """The refit refused the measurements, its probe run failed or it ran past its bound; the
    message is one line naming the file, the line or the bound, and the fix."""


@contextlib.contextmanager
def refit_calibration(
    path: str,
    program: Sequence[str],
    system: str,
    *,
    timeout_s: float = REFIT_TIMEOUT_S,
    timeout_option: str = "",
) -> Iterator[tuple[dict[str, str], list[str]]]:
    """Refits to the measured runs of ``path`` for ``program``; yields while the job that
    reads the refitted file runs, then removes it with its private folder.

    Args:
        path: the ``--calibrate-from`` file.
        program: the program and its arguments, as the launcher runs them.
        system: the job's ``--system`` ("" for the smallest POD that holds it).
        timeout_s: how long the refit may run before it is ended.
        timeout_option: the launcher's option that sets ``timeout_s``, named in the message
            when it runs past (empty: the bound is :data:`REFIT_TIMEOUT_S`).

    Yields:
        The variable that points a job at the refitted file, and the lines to print.

    Raises:
        RefitError: a bad file of measurements, a failed probe run, or a refit that ran past
            ``timeout_s`` (one line).
    """
    folder = tempfile.mkdtemp(prefix="poprun-emu-calibrate-")
    try:
        out = os.path.join(folder, "calibration.json")
        command = [
            sys.executable, "-m", "popdist_emu.calibration", "--calibrate-from", path,
            "--system", system, "--out", out, "--", *program,
        ]  # fmt: skip
        code, stdout, stderr = _run(command, timeout_s, path, timeout_option)
        if code != 0 or not os.path.exists(out):
            raise RefitError((stderr.strip().splitlines() or [f"the refit exited with {code}"])[-1])
        yield {ENV_CALIBRATION_FILE: out}, stdout.splitlines()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(command: list[str], timeout_s: float, path: str, option: str) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of the refit, which runs in a session of its own so
    that everything it starts can be ended with it (past its bound, or on Ctrl-C)."""
    process, release = start_session(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        release()  # an ending signal that came meanwhile acts here
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(process)
        bound = f"{option} {timeout_s:g} s" if option else f"its bound of {timeout_s:g} s"
        raise RefitError(
            f"--calibrate-from {path!r}: the refit ran past {bound} and was ended (it runs the "
            f"program once, offline): check that `poprun-emu --offline-mode PROGRAM` ends"
            f"{', or raise ' + option if option else ''}."
        ) from None
    except BaseException:  # Ctrl-C or SIGTERM: the refit's session does not get it
        _stop(process)
        raise
    return process.returncode, stdout, stderr


def _stop(process: subprocess.Popen) -> None:
    """Ends the refit's process group and closes its pipes, every wait bounded."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        end_process_group(process, STOP_GRACE_S)
    with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
        process.communicate(timeout=STOP_GRACE_S)
