"""No figure depends on a model's name: the program's structure weighs every fitted term, a
user may name a calibrated family instead (``Options.calibration_family``, ``poprun-emu
--calibration-family``), and every report names the parameter set and each phase's terms."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import optax
import pytest
from deadlines import within
from two_dense_blocks import two_dense_blocks

import hardware
import popdist_emu
from popdist_emu.reports import summary

# A pipelined replica of two matmul blocks over two IPUs: the structure of the issue's
# 4-IPU pipelined transformer, small enough to compile in seconds.
ACCUMULATION = 4
PARAMS = {f"w{i}": np.full((64, 64), 0.01, np.float32) for i in range(2)}


def _simulate(name: str, **option_kwargs) -> hardware.StepSimulation:
    options = popdist_emu.Options(
        layout=hardware.ReplicaLayout(4, 2, ipus_per_replica=2),
        system="pod16",
        gradient_accumulation=ACCUMULATION,
        execution_strategy=popdist_emu.PipelinedExecution("B0", "B1"),
        **option_kwargs,
    )
    trainer = popdist_emu.Trainer(two_dense_blocks(), optax.adam(1e-3), PARAMS, options)
    rng = np.random.default_rng(0)
    lead = (1, ACCUMULATION, 2, 16)
    batch = (
        rng.standard_normal((*lead, 64)).astype(np.float32),
        rng.standard_normal(lead).astype(np.float32),
    )
    return popdist_emu.simulate(trainer, batch, name=name)


def _figures(sim: hardware.StepSimulation) -> dict:
    return {k: v for k, v in summary(sim).items() if k != "model"}


def test_renaming_the_model_changes_no_figure():
    bert, lm = _simulate("TinyBert"), _simulate("TinyLM")
    assert _figures(bert) == _figures(lm)
    assert bert.parameters == lm.parameters == hardware.load_parameters()
    # The structure decides: matmul FLOPs, and a replica of two IPUs.
    u = summary(bert)["uncertainty"]
    assert u["matmul_share"] > 0.5 and u["multi_ipu_sync_calls"] == 1
    assert u["parameters"].startswith("structural")
    assert "matmul_efficiency" in u["terms"]["compute"]
    assert "multi_ipu_sync_seconds" in u["terms"]["host_sync"]


def test_a_named_family_changes_the_figures_and_is_named_in_every_report(tmp_path):
    structural = _simulate("TinyLM")
    bert = _simulate("TinyLM", calibration_family="bert")
    assert bert.parameters.family_override == "BERT"
    assert bert.samples_per_second != structural.samples_per_second
    shared = _simulate("TinyLM", calibration_family="ResNet-50")  # no multi-IPU term
    assert shared.samples_per_second > structural.samples_per_second
    u = summary(bert)["uncertainty"]
    assert "BERT family override" in u["parameters"] and u["band_family"] == "BERT"
    text = popdist_emu.reports.format_summary(bert)
    assert "parameter set: BERT family override" in text and "host_sync_seconds" in text
    popdist_emu.reports.write_reports(bert, tmp_path)
    stored = json.loads((tmp_path / "summary.json").read_text())["uncertainty"]
    assert stored["parameters"] == u["parameters"] and stored["terms"] == u["terms"]
    page = (tmp_path / "report.html").read_text()
    assert "BERT family override" in page and "host_sync_seconds" in page


def test_an_unknown_family_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"'GPT'.*use one of ResNet-50, BERT") as error:
        popdist_emu.Options(calibration_family="GPT")
    assert "\n" not in str(error.value)


def _poprun(*words: str) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    path = shutil.which("poprun-emu", path=str(bin_dir))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [str(path), *words], capture_output=True, text=True, env=env, timeout=within(120)
    )


def test_the_launcher_refuses_an_unknown_family_before_launch_and_passes_a_known_one():
    refused = _poprun("--calibration-family", "GPT", "python", "-c", "print('started')")
    assert refused.returncode == 2 and "started" not in refused.stdout
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("poprun-emu: error: ") and "ResNet-50, BERT" in line
    program = "import popdist_emu; print(repr(popdist_emu.Options().calibration_family))"
    passed = _poprun("--calibration-family", "bert", "python", "-c", program)
    assert passed.returncode == 0, passed.stderr[-2000:]
    assert passed.stdout.strip().splitlines()[-1].split(">:", 1)[-1] == "'BERT'"
