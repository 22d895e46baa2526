"""The documentation shows what its commands print.

Its figures are measured by hand when a feature lands, and a later change to the hardware
model moves them without any test noticing (five examples had drifted by 2026-11-26). The
planner sweep below is cheap (jaxpr shapes only, about 5 s) and goes through the whole
hardware model (the convolution planner, the memory model, the compute time), so a change
that moves the documented model figures fails here until the page is refreshed.
"""

import subprocess
import sys

from deadlines import within
from repo_scripts import ROOT

DOC = (ROOT / "docs" / "model-parallelism.md").read_text()
README = (ROOT / "README.md").read_text()
FRONT_PAGE_LINES = 150  # the README is a user's front page; the rest lives in docs/

SWEEP = (
    "python examples/resnext.py --sweep --micro-batch-sizes 8 16 24 28 32 36 40 "
    "--proportions 0.1 0.2 0.35 0.6 0.8"
)


def test_the_resnext_planner_sweep_table_is_what_its_command_prints():
    assert " ".join(SWEEP.split()) in " ".join(DOC.split()), "the page names the command"
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
    readme = [line.rstrip() for line in DOC.splitlines()]
    start = readme.index(table[0])
    assert readme[start : start + len(table)] == table


def test_the_readme_is_a_front_page_whose_test_command_is_ci():
    assert len(README.splitlines()) <= FRONT_PAGE_LINES, "move the new text into docs/"
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"\n{ci}\n" in README, "the README's test command must be what .ci/run runs"
    for page in README.split("](docs/")[1:]:
        assert (ROOT / "docs" / page.split(")")[0]).is_file(), page.split(")")[0]
