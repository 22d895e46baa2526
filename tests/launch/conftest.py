"""Runs poprun-emu as a user does: the installed console script, in a subprocess, with a timeout."""

import os
import shutil
import subprocess
import sys

import pytest
from deadlines import within


@pytest.fixture
def poprun(tmp_path):
    """``poprun(*words, timeout=120) -> CompletedProcess`` of ``poprun-emu words`` in tmp_path;
    the timeout is an idle machine's, scaled (``deadlines.within``)."""
    script = shutil.which("poprun-emu")
    command = [script] if script else [sys.executable, "-m", "launch"]

    def run(*words, timeout=120, env=None):
        return subprocess.run(
            [*command, *words],
            capture_output=True,
            text=True,
            timeout=within(timeout),
            cwd=tmp_path,
            env={**os.environ, **(env or {})},
        )

    return run
