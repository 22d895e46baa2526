"""``--calibrate-from``'s refit from the launchers' side (contract/_refit.py): its wait is
bounded and its private folder goes with it, whatever happens. Real refit processes
(``python -m popdist_emu.calibration``); the refit's figures are tested in
``tests/popdist_emu/calibration`` and a whole refitted job in
``tests/launch/test_calibrate_from.py``."""

import json
import os
import sys
import tempfile
import time

import pytest
from deadlines import within

from contract import RefitError, refit_calibration

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """A good file of measured runs; the temporary directory is a fresh one in tmp_path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps({"replicas": 2, "samples_per_second": 50_000}) + "\n")
    return path


def _commands_naming(text: str) -> list[str]:
    """Command lines of live processes that hold ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.isdigit() and text in command:
            found.append(command)
    return found


@pytest.mark.parametrize("option", ["", "--timeout"])
def test_a_refit_past_its_bound_is_ended_in_one_line_and_leaves_nothing(runs, option):
    """The refit used to be waited for without a bound (a program that never ends offline
    held the launcher forever)."""
    started = time.monotonic()
    refit = refit_calibration(str(runs), SLEEPER, "", timeout_s=1.0, timeout_option=option)
    with pytest.raises(RefitError) as refused, refit:
        pytest.fail("a refit that ran past its bound was used")
    assert time.monotonic() - started < within(15)
    (line,) = str(refused.value).splitlines()
    bound = "--timeout 1 s" if option else "its bound of 1 s"
    assert line.startswith(f"--calibrate-from {str(runs)!r}: the refit ran past {bound} and ")
    assert line.endswith(", or raise --timeout." if option else "` ends.")
    assert os.listdir(tempfile.gettempdir()) == []  # its folder is gone
    assert _commands_naming(str(runs)) == []  # and so is the refit's process


def test_a_refused_file_leaves_no_folder(runs):
    runs.write_text('{"replicas": 2}\n')
    refit = refit_calibration(str(runs), SLEEPER, "", timeout_s=within(120))
    with pytest.raises(RefitError, match="'samples_per_second' is missing"), refit:
        pytest.fail("a refused file was used")
    assert os.listdir(tempfile.gettempdir()) == []
