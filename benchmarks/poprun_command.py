"""How a benchmark starts ``poprun-emu``: the console script installed beside this Python,
else the launcher's module run by this Python (a checkout not installed as a package)."""

from __future__ import annotations

import os
import shutil
import sys


def poprun_command() -> list[str]:
    """The words that start ``poprun-emu``."""
    script = shutil.which("poprun-emu", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "launch"]
