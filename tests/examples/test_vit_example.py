"""examples/vit.py: the tiny ViT learns the digits pipelined over two IPUs; ViT-B/16 offline
from shapes; its placement and refusals."""

import os
from unittest import mock

import pytest
from repo_scripts import load_example


@pytest.fixture(scope="module")
def vit():
    return load_example("vit")


def test_stages_put_embeddings_first_and_head_last(vit):
    stages = vit.stages("base", [3, 3, 3, 3])
    assert stages[0].blocks == ("embeddings", "layer00", "layer01", "layer02")
    assert stages[-1].blocks == ("layer09", "layer10", "layer11", "head")
    assert [s.ipu for s in stages] == [0, 1, 2, 3]


def test_the_tiny_vit_learns_the_digits_on_two_pipelined_ipus(vit, capsys):
    env = {"POPDIST_NUM_IPUS_PER_REPLICA": "2"}
    with mock.patch.dict(os.environ, env):
        report = vit.main(["--model", "tiny", "--steps", "90"])
    capsys.readouterr()
    assert report["gradient_accumulation"] == 3  # 2 x 2 stages - 1
    assert report["final_loss"] < 0.6 * report["first_loss"]
    assert report["accuracy"] > 0.5  # ten classes: chance is 0.1


def test_vit_b16_offline_from_shapes(vit, capsys):
    """ViT-B/16 with its pre-logits layer (87.2 M parameters) compiled from shapes on four
    IPUs, never allocated."""
    env = {"POPDIST_EMU_OFFLINE": "1", "POPDIST_NUM_IPUS_PER_REPLICA": "4"}
    argv = ["--model", "base", "--micro-batch-size", "2", "--gradient-accumulation", "8"]
    with mock.patch.dict(os.environ, env):
        report = vit.main([*argv, "--recompute", "--available-memory-proportion", "0.3"])
    out = capsys.readouterr().out
    assert 87_000_000 < report["parameters"] < 87_300_000  # 86.6 M and the pre-logits layer
    assert report["offline"] and "accuracy" not in report
    assert len(report["memory_per_ipu"]) == 4 and report["samples_per_second"] > 0
    assert "pipeline: pipelined over 4 IPUs with recomputation" in out


def test_layers_per_ipu_refused_in_one_line(vit, capsys):
    with pytest.raises(SystemExit) as exit_:
        vit.layers_per_ipu("3,3,3", 12, 4)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--layers-per-ipu '3,3,3' must give 4" in err and "\n" not in err
