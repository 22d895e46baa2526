"""Final parameters are bit-identical for 16 replicas on 1, 4 and 16 instances, and a NaN/Inf
gradient is reported with the same replica and step by every instance of every layout.

Runs the real launcher; every instance computes under one CPU (poprun-emu pins it), so the
layouts differ only in how replicas are spread over processes.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from deadlines import within

JOB = Path(__file__).with_name("layout_job.py")


@pytest.mark.skipif(shutil.which("poprun-emu") is None, reason="poprun-emu is not installed")
def test_final_params_bit_identical_across_layouts(tmp_path):
    results = {}
    for instances in (1, 4, 16):
        out = tmp_path / f"params_{instances}.npz"
        cmd = ["poprun-emu", "--num-replicas", "16", "--num-instances", str(instances)]
        proc = subprocess.run(
            [*cmd, str(JOB), str(out)], capture_output=True, text=True, timeout=within(240)
        )
        assert proc.returncode == 0, f"{instances} instances failed:\n{proc.stderr[-3000:]}"
        with np.load(out) as saved:
            results[instances] = {k: saved[k] for k in saved.files}
    for instances, saved in results.items():
        message = str(saved.pop("nan_message"))
        assert "global replica 13 at step 4 (micro-batch 1 of" in message, (instances, message)
    reference = results[1]
    assert set(reference) == {"conv", "dense"}
    for instances in (4, 16):
        for name, value in reference.items():
            got = results[instances][name]
            assert got.tobytes() == value.tobytes(), (
                f"{name} differs between 1 and {instances} instances by {np.abs(got - value).max()}"
            )


def test_job_script_is_importable_without_running():
    # The job is a plain program; importing it (e.g. by pytest's collection) runs nothing.
    code = f"import runpy; runpy.run_path({str(JOB)!r}, run_name='not_main')"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=within(120))
