"""examples/train.py: its flags, its final JSON line, --save, and offline mode."""

import importlib.util
import json
import os
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

TRAIN = Path(__file__).parents[2] / "examples" / "train.py"


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("example_train", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def test_trains_and_saves(train, tmp_path, capsys):
    path = tmp_path / "params.npz"
    # 10 steps: AdamW's first few steps on this network barely move the loss.
    argv = ["--steps", "10", "--micro-batch-size", "16", "--device-iterations", "2"]
    train.main([*argv, "--gradient-accumulation", "2", "--save", str(path)])
    report = last_json(capsys.readouterr().out)
    for key in ("first_loss", "final_loss", "test_accuracy", "replicas", "instances"):
        assert key in report
    assert (report["steps"], report["global_batch"], report["replicas"]) == (10, 32, 1)
    assert report["final_loss"] < report["first_loss"]
    assert 0.0 <= report["test_accuracy"] <= 1.0
    with np.load(path) as saved:
        assert saved["layer1/conv/w"].shape == (5, 5, 1, 10)
        assert saved["layer3/w"].shape == (80, 256)
        assert len(saved.files) == 8


def test_offline_mode_reports_without_data(train, capsys):
    with mock.patch.dict(os.environ, {"POPDIST_EMU_OFFLINE": "1"}):
        train.main(["--steps", "2", "--micro-batch-size", "4"])
    report = last_json(capsys.readouterr().out)
    assert report["offline"] is True and report["final_loss"] is None
    assert report["micro_step_flops"] > 0
    assert report["allreduce_bytes"] > 4 * 20000


def test_an_oversized_micro_batch_is_refused_from_its_shapes_before_any_data(train, capsys):
    """Offline sizing at a micro-batch of 10,000,000 on 8 instances: no data of that size is
    made (the host sample is bounded) and the memory bound is checked before the step
    compiles (its stream buffers alone do not fit), so it is refused in seconds (compiling
    that step took 76 s, and the host sample built three batches of 80 million samples)."""
    env = {"POPDIST_EMU_OFFLINE": "1", "POPDIST_NUM_TOTAL_REPLICAS": "8"}
    env |= {"POPDIST_NUM_LOCAL_REPLICAS": "1", "POPDIST_EMU_HOSTS": "localhost"}
    with mock.patch.dict(os.environ, env), pytest.raises(SystemExit) as refused:
        train.main(["--steps", "1", "--micro-batch-size", "10000000"])
    assert refused.value.code == 1
    assert "Out of memory: digits-cnn at micro-batch 10000000" in capsys.readouterr().err


def test_the_offline_host_sample_is_bounded(train):
    import popdist_emu

    options = popdist_emu.Options(replication_factor=4, gradient_accumulation=8)
    args = train.parse_args(["--micro-batch-size", "10000000", "--gradient-accumulation", "8"])
    stats, micro = train.sample_loader(options, args, calls=1)
    assert micro == train.SAMPLE_BOUND // 32 and stats.items == 1


def test_lever_flags_reach_the_trainer(train, capsys):
    # --offline-mode keeps it cheap: the flags only have to pick the stage and the figures.
    with mock.patch.dict(os.environ, {"POPDIST_EMU_OFFLINE": "1"}):
        train.main(["--steps", "1", "--replicated-tensor-sharding", "--offload-optimiser"])
    report = last_json(capsys.readouterr().out)
    assert report["sharding_domain_size"] == 1  # one replica: its own domain
    assert report["optimiser_state_bytes_per_replica"] == 0
    assert report["offload_bytes_per_update"] > 0


def test_steps_must_fill_device_iterations(train, capsys):
    with pytest.raises(SystemExit):
        train.main(["--steps", "3", "--device-iterations", "2"])
    assert "multiple of --device-iterations" in capsys.readouterr().err
