"""The ``poprun-emu`` installed beside the Python running the tests, for real launches.

A test that launches a job runs the launcher of the interpreter under test (a venv's, CI's),
never another one on ``PATH``, and gives the job a ``PATH`` that finds that interpreter's
scripts first, as a user's activated venv would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def poprun_emu() -> tuple[str, dict[str, str]]:
    """The path of ``poprun-emu`` beside ``sys.executable`` and the environment to run it
    in (this one, with that folder first on ``PATH``).

    Raises:
        AssertionError: the launcher is not installed there (``pip install -e .``).
    """
    folder = str(Path(sys.executable).parent)
    launcher = shutil.which("poprun-emu", path=folder)
    assert launcher is not None, "poprun-emu is not installed beside this Python"
    return launcher, {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def run_program(
    folder: Path, name: str, text: str, *options: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``text`` written as program ``name`` in ``folder`` and run under ``poprun-emu
    OPTIONS``; its output captured. Fails the test, with the end of its stderr, unless it
    exits 0."""
    program = folder / name
    program.write_text(text)
    launcher, env = poprun_emu()
    out = subprocess.run(
        [launcher, *options, str(program)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out
