"""A PopTorch program under ``poprun-emu --offline-mode``: compiled, simulated, reported, ended.

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import within

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

PROGRAM = Path(__file__).parents[3] / "examples" / "poptorch_tutorial.py"


def _run(script: str, *words: str) -> subprocess.CompletedProcess:
    """Runs the console ``script`` installed beside this Python (its bin first on PATH)."""
    bin_dir = Path(sys.executable).parent
    path = shutil.which(script, path=str(bin_dir))
    assert path is not None, f"{script} is not installed beside this Python"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [path, *words], capture_output=True, text=True, env=env, timeout=within(600)
    )


def test_offline_run_reports_the_pipeline_memory_per_ipu_and_throughput(tmp_path: Path) -> None:
    out = _run(
        "poprun-emu", "--offline-mode", "--num-replicas", "2", "--num-instances", "2",
        "--ipus-per-replica", "4", "--report-dir", str(tmp_path / "report"),
        str(PROGRAM), "--steps", "4", "--strategy", "pipelined",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    # The program ends at its first training call: no losses are made up, none printed.
    assert "nothing runs on an offline target" in out.stderr
    assert '"losses"' not in out.stdout
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert (summary["replicas"], summary["ipus_per_replica"]) == (2, 4)
    assert summary["samples_per_second"] > 0 and summary["fits_in_memory"]
    stages = summary["pipeline"]["stages"]
    assert [s["blocks"] for s in stages] == [["B1"], ["B2"], ["B3"], ["B4"]]
    assert all(s["memory_total"] > 0 and s["fits_in_memory"] for s in stages)  # per IPU
    assert summary["phases"]["pipeline_bubble"] > 0
    # The program's loader was measured: a tiny in-memory dataset, read between calls.
    assert summary["host_cpu_seconds_per_sample"] > 0 and summary["host_compute_seconds"] > 0
    assert not summary["host_bound"]
    for name in ("trace.json", "report.html"):
        assert (tmp_path / "report" / name).stat().st_size > 0


def test_scaling_sweeps_a_poptorch_program(tmp_path: Path) -> None:
    out = _run(
        "poprun-emu-scaling", "--num-replicas", "1,2,4", "--ipus-per-replica", "4", "--out",
        str(tmp_path / "out"), str(PROGRAM), "--strategy", "pipelined",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "scaling.json").read_text())
    rows = doc["series"][0]["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert rows[0]["summary"]["pipeline"]["strategy"] == "pipelined"
    assert rows[2]["samples_per_second"] > rows[0]["samples_per_second"]


HOST_BOUND_PROGRAM = """
import torch
import popdist_emu.poptorch as poptorch


class Augmented(torch.utils.data.Dataset):
    \"\"\"Each sample built in Python, as a costly per-sample transform would be.\"\"\"

    def __len__(self):
        return 512

    def __getitem__(self, i):
        total = 0.0
        for k in range(2_500):  # about 0.2 ms of CPU per sample here
            total += (i * k) % 7
        x = torch.full((8,), total / 1e5)
        return x, torch.tensor(i % 3)


class Loss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 3)

    def forward(self, x, y):
        out = self.linear(x)
        return out, torch.nn.functional.cross_entropy(out, y)


opts = poptorch.Options()
loader = poptorch.DataLoader(opts, Augmented(), batch_size=8, num_workers=WORKERS)
model = poptorch.trainingModel(Loss(), opts, torch.optim.SGD(Loss().parameters(), lr=0.1))
for x, y in loader:
    model(x, y)
"""


# 32 workers: the IPU-bound rate lies well inside the window between the host-bound rates of
# none and of all of them, however a loaded machine moves the measured CPU per sample.
@pytest.mark.parametrize("workers", [0, 32])
def test_a_costly_loader_is_reported_host_bound_until_workers_share_it(
    tmp_path: Path, workers: int
) -> None:
    program = tmp_path / "augmented.py"
    program.write_text(HOST_BOUND_PROGRAM.replace("WORKERS", str(workers)))
    report = tmp_path / "report"
    out = _run(
        "poprun-emu", "--offline-mode", "--num-replicas", "1", "--report-dir", str(report),
        str(program),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((report / "summary.json").read_text())
    assert summary["host_cpu_seconds_per_sample"] > 2e-5  # measured: the loop is real work
    if workers == 0:  # read in the main thread, between calls: the IPUs wait for it
        assert summary["host_bound"] and summary["phases"]["host_compute"] > 0
        assert "HOST-BOUND" in out.stdout
        assert summary["samples_per_second"] < summary["ipu_bound_samples_per_second"]
    else:  # 32 worker processes ahead of the IPUs: hidden
        assert not summary["host_bound"] and "HOST-BOUND" not in out.stdout
        assert summary["samples_per_second"] == pytest.approx(
            summary["ipu_bound_samples_per_second"]
        )
    assert "host_compute" in (report / "report.html").read_text()


OUTPUT_MODE_PROGRAM = """
import torch
import popdist_emu.poptorch as poptorch


class Logits(torch.nn.Module):
    \"\"\"Returns its large logits with the loss, as a language model's head does.\"\"\"

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 32768)

    def forward(self, x, y):
        out = self.linear(x)
        return out, torch.nn.functional.cross_entropy(out, y)


opts = poptorch.Options().deviceIterations(2)
opts.Training.gradientAccumulation(4)
opts.outputMode(poptorch.OutputMode.MODE)
model = poptorch.trainingModel(Logits(), opts, torch.optim.SGD(Logits().parameters(), lr=0.1))
# No data loader: its host time is measured, and would make the two runs' figures differ.
model(torch.randn(64, 16), torch.randint(0, 32768, (64,)))
"""


def test_the_output_mode_decides_what_goes_back_to_the_host(tmp_path: Path) -> None:
    summaries = {}
    modes = {"All": "All", "Final": "Final", "EveryN": "EveryN, 2", "Sum": "Sum"}
    for mode, call in modes.items():
        program = tmp_path / f"logits_{mode}.py"
        program.write_text(OUTPUT_MODE_PROGRAM.replace("MODE", call))
        report = tmp_path / mode
        out = _run(
            "poprun-emu", "--offline-mode", "--num-replicas", "1", "--report-dir", str(report),
            str(program),
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        summaries[mode] = json.loads((report / "summary.json").read_text())
    every, final = summaries["All"], summaries["Final"]
    # One micro-batch's outputs: 8 x 32768 float32 logits and the loss.
    assert every["host_output_bytes_per_micro_batch"] == 8 * 32768 * 4 + 4
    assert (every["outputs_per_step"], final["outputs_per_step"]) == (4 * 2, 1)
    # EveryN(2) of 2 device iterations: the 4 micro-batches of the second; Sum adds up on
    # the device and copies once, as Final.
    assert (summaries["EveryN"]["outputs_per_step"], summaries["Sum"]["outputs_per_step"]) == (4, 1)
    assert every["host_io_seconds"] > final["host_io_seconds"]
    # The copies overlap the compute as far as the host link allows: never faster.
    assert every["samples_per_second"] <= final["samples_per_second"]
