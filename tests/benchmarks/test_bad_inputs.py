"""benchmarks/bad_inputs.py: its rows say what each command did.

Four of its cases run as the script runs them (real ``poprun-emu`` and
``poprun-emu-scaling`` processes, in temporary folders): an integer with an underscore, a
FIFO as ``--import-config``, a published point of ``nan`` and an ``--export-config`` through
a symlink to ``/dev/null``, which must be written in place, the symlink kept. The results
file goes to the run's ``BENCHMARK_RESULTS_DIR`` (tests/conftest.py), not over the
committed one.
"""

import json

from deadlines import within
from repo_scripts import load_benchmark

bad_inputs = load_benchmark("bad_inputs")
results_file = load_benchmark("results_file")

REFUSED = ("replicas 1_6", "config a FIFO", "scaling published nan")
IN_PLACE = "export to a link to /dev/null"


def test_the_rows_record_refusals_and_a_special_file_written_in_place():
    names = ",".join((*REFUSED, IN_PLACE))
    bad_inputs.main(["--cases", names, "--timeout", f"{within(30):g}"])
    record = json.loads((results_file.results_dir() / "bad_inputs.json").read_text())
    figures = record["figures"]
    rows = {row["case"]: row for row in figures["rows"]}
    assert set(rows) == {*REFUSED, IN_PLACE}
    for name in REFUSED:
        row = rows[name]
        assert (row["exit"], row["stderr lines"], row["started"], row["hang"]) == (
            2,
            1,
            False,
            False,
        )
        assert row["house rule"] and not row["traceback"], row
        assert "bad-inputs-" not in row["first line"]  # the temporary folder is $TMP
    assert rows["replicas 1_6"]["first line"].startswith("poprun-emu: error: ")
    assert "'1_6'" in rows["replicas 1_6"]["first line"]
    assert rows["config a FIFO"]["command"].startswith("poprun-emu --import-config '$TMP/fifo'")
    written = rows[IN_PLACE]
    assert written["exit"] == 0 and written["special file kept"] and written["started"], written
    assert figures["cases"] == 4
    assert figures["bad inputs refused in one line with exit 2, naming the value"] == "3 of 3"
    assert figures["refused before anything started"] == "3 of 3"
    assert (figures["hangs"], figures["tracebacks"]) == (0, 0)


def test_a_case_past_its_bound_is_recorded_as_a_hang_and_ended():
    case = next(c for c in bad_inputs.CASES if c.name == "replicas 1_6")
    row = bad_inputs.run_case(case, timeout_s=0.001)
    assert row["hang"] and row["exit"] is None and not row["house rule"], row
