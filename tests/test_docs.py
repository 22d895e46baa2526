"""The documentation shows what its commands print, and retypes none of it.

Figures typed into a page drift: a later change to the hardware model moves them without any
test noticing (five examples had drifted by 2026-11-26). So the pages take what a command
gives from the results file ``benchmarks/documented_runs.py`` writes (``<!-- generated: run
NAME -->``), and a test here fails when a page again carries a measured or predicted figure
typed by hand. The planner sweep below is cheap (jaxpr shapes only, about 5 s) and goes
through the whole hardware model (the convolution planner, the memory model, the compute
time), so a change that moves the recorded model figures fails here until
``python benchmarks/documented_runs.py --runs resnext-planner-sweep`` records them again.

The README's snippets are checked without running them (a run is a benchmark's cost): each
command is parsed by its console script's own parser and the files it names exist, and the
Trainer snippet uses only public names.
"""

import ast
import json
import re
import shlex
import subprocess
import sys

import pytest
from deadlines import within
from repo_scripts import ROOT, load_benchmark, load_example

DOC = (ROOT / "docs" / "model-parallelism.md").read_text()
README = (ROOT / "README.md").read_text()
GETTING_STARTED = (ROOT / "docs" / "getting-started.md").read_text()
FRONT_PAGE_LINES = 150  # the README is a user's front page; the rest lives in docs/

SWEEP = (
    "python examples/resnext.py --sweep --micro-batch-sizes 8 16 24 28 32 36 40 "
    "--proportions 0.1 0.2 0.35 0.6 0.8"
)


def test_the_resnext_planner_sweep_table_is_what_its_command_prints():
    assert "<!-- generated: run resnext-planner-sweep -->" in DOC, "the page renders the run"
    recorded = json.loads((ROOT / "benchmarks" / "results" / "documented_runs.json").read_text())
    row = next(r for r in recorded["figures"] if r["run"] == "resnext-planner-sweep")
    assert " ".join(SWEEP.split()) == row["command"], "the file records this command"
    printed = subprocess.run(
        [sys.executable, *SWEEP.split()[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=within(180),
        check=True,
    ).stdout
    table = [line.rstrip() for line in printed.splitlines() if line.strip()]
    assert table[0].startswith("bs \\ amp") and table[-1].startswith("best:")
    start = table.index(row["figures"]["printed"][0])
    assert table[start:] == row["figures"]["printed"]


# Pages that show what commands give, and the generated requests that carry those figures.
GENERATED = {
    "poptorch.md": ("runs poptorch-tutorial-4-ipus,poptorch-tutorial-2-instances",),
    "scaling.md": ("run resnet50-mlperf-v1.1-sweep",),
    "model-parallelism.md": (
        "run train-pipelined",
        "runs train-offline-pipelined,train-offline-sharded",
        "runs bert-large-v1.1-pod16,bert-large-v1.1-pod64,bert-large-v1.1-pod128",
        "run bert-base-planner",
        "run resnext-planner-sweep",
        *(f"run {model}-tiny" for model in ("vit", "resnext", "efficientnet")),
        "run vit-base-pod64",
        "run resnext-101-pod16",
        "run efficientnet-b4-pod16",
    ),
    "hardware-model.md": (
        "calibration shared",
        "calibration BERT",
        "results validate",
        "results host_bound_repeats",
    ),
}
# Every page is read for typed figures, those above and the rest.
PAGES = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
# What a run measures or the model predicts, typed as a figure: an accuracy, a loss's
# course, a bubble or balance, a step time, a throughput not marked as published, a
# prediction's error.
MEASURED = re.compile(
    r"accuracy:? \d|\d ?% (test )?accuracy|loss (from )?\d+(\.\d+)? ?(->|to) ?\d"
    r"|bubble \d|balance \d|\d ?ms\b|\d[\d,.]* ?k? ?(img|images|samples|sequences|seq)/s"
    r"|\d ?% (slow|fast)\b"
)


@pytest.mark.parametrize("page", PAGES)
def test_pages_take_their_measured_figures_from_results_files(page):
    text = (ROOT / "docs" / page).read_text()
    for request in GENERATED.get(page, ()):
        assert f"<!-- generated: {request} -->" in text, (page, request)
    typed = [
        f"{page}:{number}: {match.group(0)!r} in {line.strip()[:80]!r}"
        for number, line in enumerate(text.splitlines(), 1)
        for match in MEASURED.finditer(line)
        if not (match.group(0).endswith("/s") and "published" in line.lower())
    ]
    assert not typed, "figures typed by hand; render them from a results file:\n" + "\n".join(typed)


def test_the_readme_is_a_front_page_whose_test_command_is_ci():
    assert len(README.splitlines()) <= FRONT_PAGE_LINES, "move the new text into docs/"
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"\n{ci}\n" in README, "the README's test command must be what .ci/run runs"
    for page in README.split("](docs/")[1:]:
        assert (ROOT / "docs" / page.split(")")[0]).is_file(), page.split(")")[0]
    # No dates or timings: they are history or measurements, which live in CHANGELOG.md and
    # benchmarks/results/ (the test command's words are no timing).
    prose = README.replace(ci, "")
    dated = re.findall(
        r"\b20\d\d-\d\d(?:-\d\d)?\b|\b\d+(?:\.\d+)? ?(?:s|ms|min|seconds|minutes)\b", prose
    )
    assert not dated, f"the README retypes dates or timings: {dated}"


def test_the_readme_s_validation_summary_is_the_latest_validation_run():
    """The README's one generated block is what ``benchmarks/results/validate.json`` gives;
    ``python -m docs_build.readme`` writes it after ``benchmarks/validate.py --write``."""
    from docs_build import readme

    summary = readme.summary_of()
    assert readme.refreshed(README, summary) == README, "run python -m docs_build.readme"
    block = README.split(readme.START)[1].split(readme.END)[0]
    assert f"{100 * summary['loo_row_median_abs_error']:.1f} %" in block
    assert len(block.strip().splitlines()) == 2 + len(readme.MEASURES)
    with pytest.raises(ValueError, match="no block"):
        readme.refreshed("# a README without the markers\n", summary)


def test_the_readme_writer_refuses_a_readme_without_its_block_in_one_line(tmp_path, capsys):
    from docs_build import readme

    page = tmp_path / "README.md"
    page.write_text("# a README without the markers\n")
    assert readme.main(page) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no block" in err
    assert page.read_text() == "# a README without the markers\n"
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]  # nothing half-written


def _readme_blocks() -> list[tuple[str, str]]:
    """The README's fenced code blocks: (language, text)."""
    return re.findall(r"^```(\w*)\n(.*?)^```", README, re.DOTALL | re.MULTILINE)


def _readme_commands() -> list[list[str]]:
    """The words of every command in the README's shell blocks that runs a console script
    (the part after ``&&`` in ``pip install ... && poprun-emu ...``)."""
    commands = []
    for language, text in _readme_blocks():
        for line in text.replace("\\\n", " ").splitlines() if not language else []:
            for command in line.split(" && "):
                words = shlex.split(command)
                if words and words[0] in ("poprun-emu", "poprun-emu-scaling"):
                    commands.append(words)
    return commands


def test_the_readme_s_graphcore_application_commands_name_real_programs_and_modes():
    programs = load_benchmark("graphcore_programs")
    lines = [
        shlex.split(line)
        for language, text in _readme_blocks()
        if not language
        for line in text.replace("\\\n", " ").splitlines()
        if "benchmarks/graphcore_programs.py" in line
    ]
    assert len(lines) == 2, "the README runs the vision and the NLP applications"
    known = {*programs.PROGRAMS, *programs.APPLICATIONS}
    for words in lines:
        assert (ROOT / words[1]).is_file()
        named = words[words.index("--programs") + 1].split(",")
        assert set(named) <= known, named
        assert set(words[words.index("--modes") + 1].split(",")) <= set(programs.MODES)
    ran = {name for words in lines for name in words[words.index("--programs") + 1].split(",")}
    assert ran == set(programs.APPLICATIONS) | {"resnet50", "efficientnet", "vit"}


def test_every_readme_command_parses_with_the_real_parsers_and_names_real_files(monkeypatch):
    # A renamed option or example would leave the front page's commands failing on first
    # contact; each is parsed here as its console script parses it, nothing is run.
    from hardware import ReplicaLayout
    from launch._options import parse_command_line
    from launch._program import program_command
    from popdist_emu.scaling._cli import parse as parse_sweep

    monkeypatch.chdir(ROOT)
    commands = _readme_commands()
    scripts = [words[0] for words in commands]
    assert scripts.count("poprun-emu") >= 4 and "poprun-emu-scaling" in scripts, commands
    for words in commands:
        if words[0] == "poprun-emu":
            options = parse_command_line(words[1:])
            ReplicaLayout(
                num_replicas=options.num_replicas,
                num_instances=options.num_instances,
                ipus_per_replica=options.ipus_per_replica,
            )
            program = program_command(options.program, python=sys.executable)
        else:
            config = parse_sweep(words[1:])
            program = [config.program, *config.series[0].program_args]
        script = next(word for word in program if word.endswith(".py"))
        assert (ROOT / script).is_file(), f"{' '.join(words)}: {script} is missing"


def test_the_readme_trainer_snippet_calls_only_public_names():
    import popdist_emu

    (snippet,) = [text for language, text in _readme_blocks() if language == "python"]
    tree = ast.parse(snippet)  # a syntax error fails here
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "popdist_emu"
    }
    assert {"Trainer", "Options", "ReplicaLoader"} <= used
    assert used <= set(popdist_emu.__all__), used - set(popdist_emu.__all__)


def test_the_main_jobs_options_table_names_every_option_of_its_parser(capsys):
    # The table moved out of the README by hand; train.py's own --help says what it takes.
    with pytest.raises(SystemExit):
        load_example("train").parse_args(["--help"])
    offered = set(re.findall(r"^  (--[a-z][a-z-]*)", capsys.readouterr().out, re.MULTILINE))
    table = GETTING_STARTED.split("### Its options")[1].split("\n\n")[1]
    first_cells = " ".join(row.split(" | ")[0] for row in table.splitlines()[2:])
    named = set(re.findall(r"`(--[a-z][a-z-]*)", first_cells))
    assert named == offered - {"--help"}, (named - offered, offered - named)
