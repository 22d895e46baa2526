"""The site's generated tables (``docs_build``) say what the code says, and refuse gaps.

Each generator reads the code's own definition: the console scripts' parsers, the PopTorch
option tables, the benchmarks' results files, the shipped calibration fits. These tests check
each against its source and that what cannot be generated (a new console script without a
parser builder, an unknown request in a page) fails the build rather than leaving a table
out.
"""

import json

import pytest
from repo_scripts import ROOT, load_benchmark

from docs_build import calibration, cli, names, results, runs
from launch._options import OPTIONS
from popdist_emu.popdist import _poptorch_options


def test_every_console_script_has_its_options_table():
    scripts = cli.console_scripts()
    assert {"poprun-emu", "poprun-emu-scaling"} <= set(scripts)
    for script in scripts:
        table = cli.reference(script)
        assert table.count('\n| <code class="flag">') >= 5, script
    launcher = cli.reference("poprun-emu")
    for spec in OPTIONS:
        for flag in spec.flags:
            assert f">{flag}</code>" in launcher, flag


def test_a_console_script_without_a_parser_builder_is_refused(tmp_path):
    setup = (
        (ROOT / "setup.cfg")
        .read_text()
        .replace(
            "console_scripts =\n", "console_scripts =\n    poprun-emu-new = launch._new:main\n"
        )
    )
    (tmp_path / "setup.cfg").write_text(setup)
    with pytest.raises(cli.UndocumentedScriptError, match="no parser builder"):
        cli.parser_for("poprun-emu-new", tmp_path / "setup.cfg")


def test_an_unknown_request_in_a_page_fails_the_build():
    hooks = pytest.importorskip("docs_build.hooks", reason='needs the docs extra (".[docs]")')
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="unknown request"):
        hooks.expand("text\n<!-- generated: nothing-such -->\n")
    with pytest.raises(PluginError, match=r"is not in calibration\.json"):
        hooks.expand("<!-- generated: calibration GPT-2 -->")
    with pytest.raises(PluginError, match="no documented run 'nope'"):
        hooks.expand("<!-- generated: run nope -->")
    assert ">--num-replicas</code>" in hooks.expand("<!-- generated: cli -->")


def test_the_poptorch_option_table_lists_every_method_the_tables_name():
    rows = {name: kind for name, kind, _ in names.option_rows()}
    for group, methods in _poptorch_options._NO_EFFECT.items():
        for method in methods:
            shown = f"`opts.{method}`" if group == "Options" else f"`opts.{group}.{method}`"
            assert rows[shown] == "no effect, warns once"
    for group, method in _poptorch_options._REFUSED:
        assert rows[f"`opts.{group}.{method}`"] == "refused"
    assert rows["`opts.Training.gradientAccumulation`"] == "supported"
    assert rows["`opts.Distributed.processId`"] == "supported (reads)"


def test_a_benchmarks_results_file_renders_with_its_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHMARK_RESULTS_DIR", str(tmp_path))
    written = load_benchmark("results_file").write_results(
        "demo",
        {"ratio": 1.28, "rows": [{"impl": "ring", "busbw_GBps": 5.16}]},
        ["benchmarks/demo.py", "--repeats", "3"],
    )
    assert written == tmp_path / "demo.json"
    record = json.loads(written.read_text())
    assert record["command"] == "python benchmarks/demo.py --repeats 3"
    assert len(record["load_average"]) == 3 and record["machine"] and record["date"]
    page = results.render("demo", tmp_path)
    assert page.startswith("`python benchmarks/demo.py --repeats 3`, ")
    assert "| ratio | 1.28 |" in page and "| ring | 5.16 |" in page
    assert "next run of `benchmarks/absent.py`" in results.render("absent", tmp_path)


def test_figures_of_the_same_named_values_render_as_rows_of_one_table(tmp_path, monkeypatch):
    """A median with its range for each of several figures reads as a table, not as JSON."""
    monkeypatch.setenv("BENCHMARK_RESULTS_DIR", str(tmp_path))
    load_benchmark("results_file").write_results(
        "demo",
        {
            "cold": {"median_s": 11.8, "min_s": 10.5},
            "warm": {"median_s": 8.2, "min_s": 7.5},
            "last_run": {"loss": 0.03},
        },
        ["benchmarks/demo.py"],
    )
    page = results.render("demo", tmp_path)
    assert "| figure | median_s | min_s |" in page
    assert "| cold | 11.8 | 10.5 |" in page and "| warm | 8.2 | 7.5 |" in page
    assert '| last_run | {"loss": 0.03} |' in page  # alone in its shape: a figure/value line


def test_a_shipped_fit_renders_as_the_calibration_file_holds_it(tmp_path):
    stored = json.loads(calibration.CALIBRATION.read_text())
    page = calibration.render("shared")
    assert page.startswith(f"Fitted by `{stored['fitted_by']}`")
    for row in stored["rows"]:
        published, predicted = (
            f"{row[k]:,.0f}"
            for k in ("published_samples_per_second", "predicted_samples_per_second")
        )
        assert f"| {published} | {predicted} | {row['error'] * 100:+.1f} % |" in page, row
    bert = stored["families"]["BERT"]
    family = calibration.render("BERT")
    assert f"`{bert['fitted_by']}`" in family
    assert all(f"| {row['row']} |" in family for row in bert["rows"])
    assert "`matmul_efficiency` |" in family and "closed_form" not in family
    # A refit changes the page: the figures are read from the file each build.
    stored["rows"][0]["predicted_samples_per_second"] = 12345.0
    (tmp_path / "calibration.json").write_text(json.dumps(stored))
    assert "| 12,345 |" in calibration.render("shared", tmp_path / "calibration.json")
    with pytest.raises(calibration.UnknownFitError, match="use one of shared, BERT"):
        calibration.render("GPT-2")


def test_graphcore_programs_runs_render_one_line_each_with_commands_below(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHMARK_RESULTS_DIR", str(tmp_path))
    gpt2 = "poprun-emu --offline-mode yes nlp/gpt2/pytorch/train_gpt2.py --compile-only"
    runs = [
        {"program": "vit", "path": "vision/vit/pytorch/pretrain.py", "mode": "functional",
         "instances": 2, "losses": [7.25, 6.5], "same_losses_as_first_layout": True,
         "command": "poprun-emu --num-instances 2 vision/vit/pytorch/pretrain.py",
         "exit_code": 0, "seconds": 61.2, "result": ""},
        {"program": "gpt2", "path": "nlp/gpt2/pytorch/train_gpt2.py", "mode": "offline",
         "layout": "bow-pod16, gpt2_small", "command": gpt2, "exit_code": 0, "seconds": 300.0,
         "simulated_samples_per_s": 12345.6, "published_samples_per_s": 15911,
         "error_percent": -22.4, "published_row": "B15", "result": "simulated 12345.6"},
        {"program": "vit", "path": "vision/vit/pytorch/pretrain.py", "mode": "functional",
         "instances": 2, "losses": [7.5, 6.5], "losses_not_compared": "unseeded",
         "command": "poprun-emu vision/vit/pytorch/pretrain.py", "exit_code": 0,
         "seconds": 60.0, "result": ""},
    ]  # fmt: skip
    load_benchmark("results_file").write_results("graphcore_programs", runs, ["x.py"])
    page = results.render("graphcore_programs", tmp_path)
    table = [line for line in page.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| # | program | mode | run |")
    assert table[1] == (
        "| 1 | vit: `vision/vit/pytorch/pretrain.py` | functional | 2 instances | 0 | 61.2 | "
        "loss 7.25 -> 6.5; same losses as 1 instance: True |"
    )
    assert "simulated 12,346 samples/s; published 15,911; error -22.4 % (B15)" in table[2]
    assert table[3].endswith("| loss 7.5 -> 6.5; losses not compared: unseeded |")
    assert "--compile-only" not in "\n".join(table)  # commands go below the table
    assert f"2. `{gpt2}`" in page


def test_documented_runs_render_one_by_one_and_as_a_table(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHMARK_RESULTS_DIR", str(tmp_path))
    common = {"exit_code": 0, "seconds": 9.5, "date": "2026-11-28 23:00 UTC", "last_line": "{}"}
    rows = [
        {"run": "train-offline-pipelined", "strategy": "pipelined", "command": "poprun-emu a",
         **common, "figures": {"step_ms": 1.27, "bubble_percent": 76.5, "balance": 2.32,
                               "memory_per_ipu_mib": "1.6, 2.0"}},
        {"run": "resnet50-mlperf-v1.1-sweep", "command": "poprun-emu-scaling b", **common,
         "figures": {"points": [{"replicas": 16, "speed-up": 1.0, "Karp-Flatt e": None}],
                     "analysis": ["Amdahl's law fits a serial fraction s = 3.1e-02."]}},
        {"run": "resnext-planner-sweep", "command": "python c", **common,
         "figures": {"printed": ["bs \\ amp  0.1", "best: batch size 32"]}},
    ]  # fmt: skip
    load_benchmark("results_file").write_results("documented_runs", rows, ["x.py"])
    table = runs.render_runs("train-offline-pipelined", tmp_path)
    assert "| strategy | simulated step (ms) | bubble (%) | balance |" in table
    assert "| pipelined | 1.27 | 76.5 | 2.32 | 1.6, 2.0 | 0 |" in table
    assert "1. `poprun-emu a` (exit code 0, 9.5 s); 2026-11-28 23:00 UTC on " in table
    sweep = runs.render_run("resnet50-mlperf-v1.1-sweep", tmp_path)
    assert "| 16 | 1 | - |" in sweep and "- Amdahl's law fits" in sweep
    assert "```\nbs \\ amp  0.1\nbest: batch size 32\n```" in runs.render_run(
        "resnext-planner-sweep", tmp_path
    )
    assert "Not recorded yet: `python benchmarks/documented_runs.py --runs bert-base-planner`" in (
        runs.render_run("bert-base-planner", tmp_path)
    )
    with pytest.raises(runs.UnknownRunError, match="no documented run 'train-typo'"):
        runs.render_runs("train-offline-pipelined,train-typo", tmp_path)
