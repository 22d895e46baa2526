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
    assert report["gradient_accumulation"] == 3  # 2 x 2 - 1, PopTorch's least for 2 stages
    assert report["parameters"] > 100_000 and len(report["memory_per_ipu_per_stage"]) == 2
    assert "pipeline: pipelined over 2 IPUs with recomputation" in out


def test_available_memory_proportion_per_ipu(bert, capsys):
    """One proportion per IPU (Graphcore's BERT configurations list them): each IPU's matmuls
    are planned with its own, as the printed per-IPU lines say; a count that is neither 1 nor
    the IPUs per replica is refused in one line."""
    env = {"POPDIST_EMU_OFFLINE": "1", "POPDIST_NUM_IPUS_PER_REPLICA": "2"}
    argv = ["--model", "tiny", "--sequence-length", "16", "--precision", "fp32"]
    with mock.patch.dict(os.environ, env):
        report = bert.main([*argv, "--available-memory-proportion", "0.3", "0.2"])
        out = capsys.readouterr().out
        assert report["available_memory_proportion"] == {"IPU0": 0.3, "IPU1": 0.2}
        assert "IPU0: always-live" in out and "availableMemoryProportion 0.3," in out
        assert "IPU1: always-live" in out and "availableMemoryProportion 0.2," in out
        with pytest.raises(SystemExit) as exit_:
            bert.main([*argv, "--available-memory-proportion", "0.3", "0.2", "0.1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "one per IPU of the replica (2)" in err and "\n" not in err


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


def test_lamb_with_replicated_tensor_sharding_runs_and_shards_the_state(bert, capsys, tmp_path):
    """Graphcore's BERT trains with LAMB and RTS: LAMB's state is sharded over the 4 replicas
    (its per-tensor norms all-reduced over the domain), so each IPU holds a quarter of it."""
    env = {
        "POPDIST_EMU_OFFLINE": "1",
        "POPDIST_NUM_IPUS_PER_REPLICA": "2",
        "POPDIST_NUM_TOTAL_REPLICAS": "4",
        "POPDIST_NUM_LOCAL_REPLICAS": "4",
    }
    argv = ["--model", "tiny", "--sequence-length", "16", "--precision", "fp32"]
    state = {}
    for flags in ((), ("--replicated-tensor-sharding",)):
        report_dir = tmp_path / ("rts" if flags else "whole")
        with mock.patch.dict(os.environ, {**env, "POPDIST_EMU_REPORT_DIR": str(report_dir)}):
            bert.main([*argv, *flags])
        summary = json.loads((report_dir / "summary.json").read_text())
        state[bool(flags)] = [s["memory"]["optimizer_state"] for s in summary["pipeline"]["stages"]]
    capsys.readouterr()
    for sharded, whole in zip(state[True], state[False], strict=True):
        assert sharded == pytest.approx(whole / 4, rel=0.01)
