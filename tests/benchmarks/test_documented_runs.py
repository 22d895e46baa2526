"""benchmarks/documented_runs.py: how it reads a run's figures and keeps the file's other
rows (the runs themselves are the benchmark's: seconds to minutes each)."""

import json

import pytest
from repo_scripts import load_benchmark

documented = load_benchmark("documented_runs")
commands = load_benchmark("documented_commands")


def test_a_training_programs_figures_come_from_its_last_json_line(tmp_path):
    stdout = (
        "[popdist-emu] simulated pod16 (Mk2 GC200): 1 replicas x 4 IPU, 1 instances\n"
        '{"losses": [2.2743631, 2.39, 0.1234567], "accuracy": 0.9331, "seconds_per_step": 0.02}\n'
    )
    figures = commands.program_line(commands.Outputs(stdout, "", tmp_path))
    assert figures == {
        "steps": 3, "first_loss": 2.2744, "last_loss": 0.1235, "test_accuracy_percent": 93.3,
    }  # fmt: skip
    train = '[1,0]<stdout>:{"steps": 100, "first_loss": 2.3, "final_loss": 0.04, '
    train += '"test_accuracy": 0.978}'
    assert commands.program_line(commands.Outputs(train, "", tmp_path)) == {
        "steps": 100, "first_loss": 2.3, "last_loss": 0.04, "test_accuracy_percent": 97.8,
    }  # fmt: skip
    # The image examples print no step count: none is shown.
    image = '{"model": "tiny", "first_loss": 2.35, "final_loss": 0.71, "accuracy": 0.816}'
    assert commands.program_line(commands.Outputs(image, "", tmp_path)) == {
        "first_loss": 2.35,
        "last_loss": 0.71,
        "test_accuracy_percent": 81.6,
    }
    assert commands.program_line(commands.Outputs("no JSON here\n", "", tmp_path)) == {}


def test_the_bert_rows_run_the_validated_configurations():
    run = commands.RUNS["bert-large-v1.1-pod64"]
    row = load_benchmark("calibration_set").all_rows()["v1.1 POD64"]
    assert " ".join(run.words).endswith(row.words) and row.launch in " ".join(run.words)
    assert run.labels["IPUs/replica x replicas"] == "8 x 8" and run.labels["GA"] == 96
    assert not run.trains and commands.RUNS["poptorch-tutorial-4-ipus"].trains


def test_a_run_keeps_the_other_runs_rows_in_the_files_order(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHMARK_RESULTS_DIR", str(tmp_path))
    documented._write([{"run": "resnet50-mlperf-v1.1-sweep", "figures": {"a": 1}}])
    documented._write([{"run": "train-pipelined", "figures": {"b": 2}}])
    documented._write([{"run": "resnet50-mlperf-v1.1-sweep", "figures": {"a": 3}}])
    rows = json.loads((tmp_path / "documented_runs.json").read_text())["figures"]
    assert [(r["run"], r["figures"]) for r in rows] == [
        ("train-pipelined", {"b": 2}),
        ("resnet50-mlperf-v1.1-sweep", {"a": 3}),
    ]


def test_an_unknown_run_is_refused_naming_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        documented.main(["--runs", "train-pipelind"])
    assert exit_.value.code == 2
    assert "--runs: unknown 'train-pipelind'; choose from poptorch-tutorial-4-ipus," in (
        capsys.readouterr().err
    )


def test_a_sweeps_analysis_is_the_sentences_it_printed_under_its_first_series():
    stdout = (
        "[poprun-emu-scaling] compiling once\n[poprun-emu-scaling] resnet50.py:\n"
        "  From 16 to 256 replicas the simulated throughput grows.\n"
        "  Parallel efficiency falls below 80 % at 128 replicas.\n"
        "[poprun-emu-scaling] 4 points in 60.0 s; report: s/report.html\n"
    )
    assert commands._first_series_sentences(stdout) == [
        "From 16 to 256 replicas the simulated throughput grows.",
        "Parallel efficiency falls below 80 % at 128 replicas.",
    ]


def test_the_vision_rows_run_their_validation_rows_configurations():
    rows = load_benchmark("calibration_set").all_rows()
    for run, key in (("vit-base-pod64", "C8"), ("resnext-101-pod16", "C7"),
                     ("efficientnet-b4-pod16", "C4")):  # fmt: skip
        words = " ".join(commands.RUNS[run].words)
        assert words.endswith(rows[key].words) and rows[key].launch in words, run
        assert "published img/s" in commands.RUNS[run].labels
