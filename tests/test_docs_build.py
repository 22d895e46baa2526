"""The site's generated tables (``docs_build``) say what the code says, and refuse gaps.

Each generator reads the code's own definition: the console scripts' parsers, the PopTorch
option tables, the benchmarks' results files. These tests check each against its source
and that what cannot be generated (a new console script without a parser builder, an
unknown request in a page) fails the build rather than leaving a table out.
"""

import json

import pytest
from repo_scripts import ROOT, load_benchmark

from docs_build import cli, names, results
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
