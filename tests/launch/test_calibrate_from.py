"""``poprun-emu --calibrate-from FILE``: a bad file is refused before anything starts; a good
one refits the terms the measured run constrains, says which, and the job runs with them.

The refit's own figures are checked on published rows in
``tests/popdist_emu/calibration/test_user.py`` (no compilation); here the launcher's part:
``examples/train.py``, a small MLP, one probe run and the job (two JAX start-ups).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_signals import with_default_signals
from deadlines import within

TRAIN = Path(__file__).parents[2] / "examples" / "train.py"


def _own_temporary_directory(tmp_path: Path) -> dict[str, str]:
    """The job's temporary directory, empty, where the refit's folder and the job's go."""
    (tmp_path / "tmp").mkdir()
    return {"TMPDIR": str(tmp_path / "tmp")}


@pytest.mark.parametrize(
    ("line", "phrase"),
    [
        ('{"replicas": 16, "samples_per_second": "fast"}', "samples_per_second 'fast' must be"),
        ('{"replicas": 16}', "'samples_per_second' is missing"),
    ],
)
def test_a_bad_measurement_file_exits_2_with_one_line_before_launch(poprun, tmp_path, line, phrase):
    (tmp_path / "runs.jsonl").write_text(line + "\n")
    env = _own_temporary_directory(tmp_path)
    result = poprun("--calibrate-from", "runs.jsonl", "python", "-c", "print('started')", env=env)
    assert result.returncode == 2 and "started" not in result.stdout
    assert os.listdir(env["TMPDIR"]) == []  # the refit's folder is gone
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith("poprun-emu: error: --calibrate-from runs.jsonl line 1: ")
    assert phrase in error


def test_a_measured_run_refits_the_term_it_constrains_and_the_job_uses_it(poprun, tmp_path):
    (tmp_path / "runs.jsonl").write_text(
        json.dumps({"replicas": 2, "samples_per_second": 50_000, "label": "my run"}) + "\n"
    )
    words = ("--offline-mode", "yes", "--num-replicas", "4", "--report-dir", "reports")
    env = _own_temporary_directory(tmp_path)
    result = poprun(
        "--calibrate-from", "runs.jsonl", *words, TRAIN, "--micro-batch-size", "8", timeout=300,
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.listdir(env["TMPDIR"]) == []  # the refitted file went with the job
    changed = [line for line in result.stderr.splitlines() if " -> " in line]
    assert len(changed) == 1 and changed[0].startswith("--calibrate-from: ")
    name, values = changed[0].removeprefix("--calibrate-from: ").split(" ", 1)
    new = float(values.split(" -> ")[1])
    assert "my run (2 replicas): error +0.0% refitted" in result.stderr.replace("-0.0%", "+0.0%")
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert summary["model_parameters"][name] == pytest.approx(new, rel=1e-3)  # the job's
    # The report names the refit, and its band is the published rows' for a family a fit saw
    # (one measured run earns no band of its own), not the shipped unseen-family band.
    u = summary["uncertainty"]
    assert "refitted to the measured runs of runs.jsonl" in u["parameters"], u
    assert u["method"].endswith("family seen (--calibrate-from refit)"), u
    assert "uncertainty: " in result.stdout and "(--calibrate-from refit)" in result.stdout


def _processes_naming(text: str) -> dict[int, bytes]:
    """The live processes whose command line names ``text``, with their command lines."""
    from contract import pid_alive

    found = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            if text.encode() in cmdline and pid_alive(int(entry)):
                found[int(entry)] = cmdline
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_refit_ends_it_in_one_line_and_leaves_nothing(tmp_path, signum):
    """Ctrl-C or SIGTERM while the refit runs (here it never ends: the program sleeps) ends
    the refit's session and removes its folder, and the launcher exits ``128 + signal`` in
    one line; before, Ctrl-C printed a traceback and SIGTERM left the refit running."""
    (tmp_path / "runs.jsonl").write_text('{"replicas": 2, "samples_per_second": 50000}\n')
    (tmp_path / "sleep.py").write_text("import time\ntime.sleep(600)\n")
    env = {**os.environ, **_own_temporary_directory(tmp_path)}
    script = shutil.which("poprun-emu")
    command = [script] if script else [sys.executable, "-m", "launch"]
    words = ("--calibrate-from", "runs.jsonl", "--num-replicas", "2", "sleep.py")
    launcher = subprocess.Popen(
        with_default_signals([*command, *words], signum), cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + within(60)
        while not os.listdir(env["TMPDIR"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.listdir(env["TMPDIR"]), "the refit never started"
        launcher.send_signal(signum)
        _, stderr = launcher.communicate(timeout=within(30))
    finally:
        launcher.kill()
    assert launcher.returncode == 128 + signum, stderr
    (line,) = stderr.strip().splitlines()
    assert line == (
        f"poprun-emu: interrupted by {signal.Signals(signum).name} during the --calibrate-from "
        "refit; ended it, nothing was launched"
    )
    assert os.listdir(env["TMPDIR"]) == []
    assert _processes_naming(str(tmp_path)) == {}  # the refit and its probe were ended
