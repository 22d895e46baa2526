"""The simulated IPU of a functional PopTorch training run: each distinct program (batch
shape) simulated once, printed by instance 0 and written to ``--report-dir``, with the same
figures as the same program under ``--offline-mode``.

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import within

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

PROGRAM = """
import torch
import popdist_emu.poptorch as poptorch


class Loss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 3)

    def forward(self, x, y):
        out = self.linear(x)
        return out, torch.nn.functional.cross_entropy(out, y)


torch.manual_seed(0)
opts = poptorch.Options().deviceIterations(2)
model = poptorch.trainingModel(Loss(), opts, torch.optim.SGD(Loss().parameters(), lr=0.1))
x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
for size in SIZES:  # a call per size: a new size is a new program
    out, loss = model(x[:size], y[:size])
    print("loss", float(loss.sum()), flush=True)
"""
SIMULATED = "[popdist-emu] simulated pod16"


def _program(tmp_path: Path, sizes: tuple[int, ...]) -> Path:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM.replace("SIZES", repr(sizes)))
    return program


def _run(cwd: Path, *words: str) -> subprocess.CompletedProcess:
    """Runs ``words`` (a console script beside this Python, or ``python``) in ``cwd``."""
    bin_dir = Path(sys.executable).parent
    path = shutil.which(words[0], path=str(bin_dir)) or sys.executable
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [path, *words[1:]], capture_output=True, text=True, env=env, timeout=within(600), cwd=cwd
    )


def _summary(directory: Path) -> dict:
    """``summary.json`` without its ``run`` (the command line, which differs by mode)."""
    summary = json.loads((directory / "summary.json").read_text())
    summary.pop("run")
    return summary


def test_a_functional_run_simulates_each_program_once_as_offline_does(tmp_path: Path) -> None:
    program = _program(tmp_path, (16, 16, 8))
    layout = ("--num-replicas", "2", "--num-instances", "2")
    out = _run(tmp_path, "poprun-emu", *layout, "--report-dir", "rep", str(program))
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    # Instance 0 prints the step of each program once: 16 samples (two calls), then 8.
    simulated = [line for line in lines if SIMULATED in line]
    assert len(simulated) == 2 and all(line.startswith("[1,0]") for line in simulated)
    steps = [line for line in lines if "  step " in line]
    assert ["for 32 samples" in steps[0], "for 16 samples" in steps[1]] == [True, True]
    assert sum("loss" in line for line in lines) == 6  # every call ran, on both instances
    # Which fit gives the band (the program's structure picks it: a matmul-led one BERT's).
    assert re.search(r"calibrated parameters: (shared|BERT) fit \(", out.stdout), out.stdout
    assert "are this machine's, not the IPU's" in out.stdout
    report = tmp_path / "rep"
    for directory in (report, report / "program-2"):
        for name in ("summary.json", "trace.json", "report.html"):
            assert (directory / name).stat().st_size > 0
    # The trace holds the instances' measured host track (the call ran) beside the IPU's.
    trace = json.loads((report / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert {"micro-steps", "compute"} <= {e.get("name") for e in events}
    # The first program's figures are the offline run's (which ends at its first call).
    offline = _run(tmp_path, "poprun-emu", "--offline-mode", *layout, "--report-dir", "off",
                   str(program))  # fmt: skip
    assert offline.returncode == 0, offline.stderr[-3000:]
    assert "loss" not in offline.stdout
    assert _summary(report) == _summary(tmp_path / "off")


def test_without_report_dir_or_launcher_it_prints_and_writes_nothing(tmp_path: Path) -> None:
    program = _program(tmp_path, (16,))
    for words in (("poprun-emu", "--num-replicas", "1"), ("python",)):
        out = _run(tmp_path, *words, str(program))
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.count(SIMULATED) == 1 and "loss" in out.stdout
        assert sorted(p.name for p in tmp_path.iterdir()) == ["program.py"]  # no report
