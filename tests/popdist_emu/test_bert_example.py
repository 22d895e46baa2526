"""examples/bert.py offline from shapes (tiny), its stage placement and its refusals."""

import importlib.util
import json
import os
from pathlib import Path
from unittest import mock

import pytest

BERT = Path(__file__).parents[2] / "examples" / "bert.py"


@pytest.fixture(scope="module")
def bert():
    spec = importlib.util.spec_from_file_location("example_bert", BERT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stages_put_embeddings_first_and_heads_last(bert):
    stages = bert.stages("base", [3, 3, 3, 3])
    assert stages[0].blocks == ("embeddings", "layer00", "layer01", "layer02")
    assert stages[-1].blocks[-1] == "heads" and len(stages) == 4
    assert bert.layers_per_ipu(None, 24, 8) == [3] * 8
    assert sum(bert.layers_per_ipu(None, 12, 5)) == 12


def test_layers_per_ipu_refused_in_one_line(bert, capsys):
    with pytest.raises(SystemExit) as exit_:
        bert.layers_per_ipu("3,7,7", 24, 4)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--layers-per-ipu '3,7,7' must give 4" in err and "\n" not in err


def test_offline_tiny_pipeline_from_shapes(bert, capsys):
    env = {"POPDIST_EMU_OFFLINE": "1", "POPDIST_NUM_IPUS_PER_REPLICA": "2"}
    with mock.patch.dict(os.environ, env):
        report = bert.main(
            ["--model", "tiny", "--sequence-length", "16", "--recompute", "--precision", "fp32"]
        )
    out = capsys.readouterr().out
    line = json.loads(out.strip().splitlines()[-1])
    assert line == report and report["offline"] and report["ipus_per_replica"] == 2
    assert report["gradient_accumulation"] == 3  # 2 x 2 - 1, PopART's least for 2 stages
    assert report["parameters"] > 100_000 and len(report["memory_per_ipu_per_stage"]) == 2
    assert "pipeline: pipelined over 2 IPUs with recomputation" in out


def test_model_too_large_for_one_ipu_is_refused_before_compiling(bert, capsys):
    env = {"POPDIST_EMU_OFFLINE": "1", "POPDIST_NUM_IPUS_PER_REPLICA": "1"}
    with mock.patch.dict(os.environ, env), pytest.raises(SystemExit) as exit_:
        bert.main(["--model", "base", "--sequence-length", "128"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "Out of memory: IPU 0 (stage 0: embeddings, layer00 ... heads, 14 blocks)"
    )
    assert "more IPUs per replica (--ipus-per-replica 2)" in err
