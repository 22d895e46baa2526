"""Through the real launcher: 2 IPUs per replica, pipelined on 2 instances and sharded on 1,
give bit-identical parameter files (examples/train.py with --save)."""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from deadlines import within

TRAIN = Path(__file__).parents[3] / "examples" / "train.py"


@pytest.mark.skipif(shutil.which("poprun-emu") is None, reason="poprun-emu is not installed")
def test_pipelined_two_instances_equals_sharded_one_instance(tmp_path):
    saved = {}
    for instances, strategy in ((2, "pipelined"), (1, "sharded")):
        out = tmp_path / f"{strategy}.npz"
        cmd = [
            "poprun-emu", "--num-replicas", "2", "--num-instances", str(instances),
            "--ipus-per-replica", "2", str(TRAIN), "--steps", "3",
            "--gradient-accumulation", "3", "--strategy", strategy, "--save", str(out),
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=within(240))
        assert proc.returncode == 0, f"{strategy} on {instances} failed:\n{proc.stderr[-3000:]}"
        last = proc.stdout.strip().splitlines()[-1]
        line = json.loads(last[last.index("{") :])  # tagged with several instances
        assert (line["ipus_per_replica"], line["strategy"]) == (2, strategy)
        with np.load(out) as params:
            saved[strategy] = {k: params[k] for k in params.files}
    assert len(saved["pipelined"]) == 8
    for name, value in saved["pipelined"].items():
        assert value.tobytes() == saved["sharded"][name].tobytes(), name
