"""poprun-emu-scaling end to end: bad arguments, and a small sweep of examples/train.py.

The sweep's every output is checked (the HTML parses and links only files that exist, the
JSON and the CSV agree) and its point equals a single ``poprun-emu --offline-mode`` run of
that configuration.
"""

import csv
import html.parser
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from child_signals import with_default_signals
from deadlines import within

import hardware
from popdist_emu.scaling import main as scaling_main

EXAMPLES = Path(__file__).parents[3] / "examples"
TRAIN = EXAMPLES / "train.py"


# What a run measures of its host (the sample of batches an offline run draws): two runs
# measure it apart.
HOST_MEASURED = (
    "host_compute_seconds",
    "host_cpu_seconds_per_sample",
    "host_bound_samples_per_second",
)


def command(name: str) -> list[str]:
    script = shutil.which(name)
    if script:
        return [script]
    module = "launch" if name == "poprun-emu" else "popdist_emu.scaling"
    return [sys.executable, "-m", module]


def run(cwd, name, *words, timeout=300):
    return subprocess.run(
        [*command(name), *map(str, words)], capture_output=True, text=True, timeout=within(timeout),
        cwd=cwd,
    )  # fmt: skip


@pytest.mark.parametrize(
    "words, needle",
    [
        (["--num-replicas", "16,x", "--out", "o", TRAIN], "--num-replicas '16,x'"),
        (["--num-replicas", "16", TRAIN], "--out"),
        (["--num-replicas", "16", "--strong", "--out", "o", TRAIN], "--strong needs"),
        (["--num-replicas", "16", "--weak", "--global-batch", "8", "--out", "o", TRAIN], "--weak"),
        (["--num-replicas", "16,32,64", "--global-batch", "8,9", "--out", "o", TRAIN], "2 values"),
        (["--num-replicas", "16", "--system", "pod7", "--out", "o", TRAIN], "pod7"),
        (["--num-replicas", "16", "--ipus-per-replica", "3", "--out", "o", TRAIN], "3"),
        (["--num-replicas", "16", "--instances-per-replica", "2", "--out", "o", TRAIN], "(0, 1]"),
        (["--num-replicas", "16", "--published", "no.csv", "--out", "o", TRAIN], "no.csv"),
        (["--num-replicas", "16", "--out", "o", "missing.py"], "missing.py"),
        (["--num-replicas", "16", "--compare", "", "--out", "o", TRAIN], "--compare"),
        (["--num-replicas", "16", "--compare", "'--x", "--out", "o", TRAIN], "quotation"),
        (["--num-replicas", "1_6", "--out", "o", TRAIN], "--num-replicas '1_6'"),
        (["--num-replicas", "\uff11\uff16", "--out", "o", TRAIN], "--num-replicas"),
        (["--num-replicas", "16", "--ipus-per-replica", "\u0664", "--out", "o", TRAIN], "ASCII"),
        (["--num-replicas", "16", "--timeout", "nan", "--out", "o", TRAIN], "ASCII digits"),
        (["--num-replicas", "16", "--timeout", "inf", "--out", "o", TRAIN], "ASCII digits"),
        (["--num-replicas", "16", "--timeout", "1e-300", "--out", "o", TRAIN], "from 1 to"),
        (["--num-replicas", "16", "--timeout", "\uff11\uff10", "--out", "o", TRAIN], "ASCII"),
        (["--num-replicas", "16", "--published", "/dev/urandom", "--out", "o", TRAIN], "device"),
        (["--num-replicas", "16", "--published", "/dev/zero", "--out", "o", TRAIN], "device"),
        (["--num-replicas", "16", "--published", "fifo", "--out", "o", TRAIN], "a FIFO, not"),
        (["--num-replicas", "16", "--published", "bin.csv", "--out", "o", TRAIN], "UTF-8"),
        (["--num-replicas", "16", "--out", "file/o", TRAIN], "which is a file"),
        (["--num-replicas", "16", "--out", "file", TRAIN], "is a file"),
        (["--num-replicas", "16", "--calibrate-from", "/dev/zero", "--out", "o", TRAIN], "device"),
        (["--num-replicas", "16", "--calibrate-from", "no.jsonl", "--out", "o", TRAIN], "no.jsonl"),
        # An empty entry was skipped (16,,32 swept 16 and 32); a published point's replicas and
        # throughput were read by int()/float(): -16, nan, 1_6 and full-width digits passed.
        (["--num-replicas", "16,,32", "--out", "o", TRAIN], "--num-replicas '16,,32'"),
        (["--num-replicas", "16,", "--out", "o", TRAIN], "--num-replicas '16,'"),
        (["--num-replicas", "16", "--published", "neg.csv", "--out", "o", TRAIN], "row 2"),
        (["--num-replicas", "16", "--published", "nan.csv", "--out", "o", TRAIN], "'nan'"),
        (["--num-replicas", "16", "--published", "wide.csv", "--out", "o", TRAIN], "'1_6'"),
        # No point a layout PopRun would run: the sweep ran nothing and exited 0.
        (["--num-replicas", "16", "--num-instances", "3", "--out", "o", TRAIN], "divisible"),
        (["--num-replicas", "12,20", "--num-instances", "8", "--out", "o", TRAIN], "12 "),
        # A misspelt option was reported as the options it hid being missing.
        (["--numreplicas", "16", "--out", "o", TRAIN], "--numreplicas: did you mean --num-r"),
        (["--num-replicas", "16", "--tmeout=9", "--out", "o", TRAIN], "did you mean --timeout"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(tmp_path, monkeypatch, capsys, words, needle):
    """The console script's own ``main``, in this process: a refusal starts nothing, so a
    process per case would only time Python's start-up (the entry point itself is run as a
    command by the tests below)."""
    (tmp_path / "file").write_text("")
    (tmp_path / "bin.csv").write_bytes(b"replicas,throughput,label\n\xff\xfe,1,x\n")
    os.mkfifo(tmp_path / "fifo")  # no writer: opening it plainly would block forever
    header = "replicas,throughput,label\n"
    (tmp_path / "neg.csv").write_text(f"{header}-16,100,x\n")
    (tmp_path / "nan.csv").write_text(f"{header}16,nan,x\n")
    (tmp_path / "wide.csv").write_text(f"{header}1_6,100,x\n")
    monkeypatch.chdir(tmp_path)
    try:
        code = scaling_main([str(word) for word in words])
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    stderr = capsys.readouterr().err
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("poprun-emu-scaling: error:"), stderr
    assert needle in lines[0]
    assert not (tmp_path / "o").exists()  # nothing ran


def test_a_refit_past_timeout_is_ended_in_one_line(tmp_path):
    """``--timeout`` bounds the ``--calibrate-from`` refit as it bounds a series' run: a
    program that never ends offline held the sweep forever before it started."""
    (tmp_path / "runs.jsonl").write_text('{"replicas": 2, "samples_per_second": 50000}\n')
    (tmp_path / "sleep.py").write_text("import time\ntime.sleep(600)\n")
    words = ("--num-replicas", "2", "--calibrate-from", "runs.jsonl", "--timeout", "1")
    started = time.monotonic()
    result = run(tmp_path, "poprun-emu-scaling", *words, "--out", "o", "sleep.py", timeout=60)
    assert time.monotonic() - started < within(30)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        "poprun-emu-scaling: error: --calibrate-from 'runs.jsonl': the refit ran past "
        "--timeout 1 s and was ended"
    ) and line.endswith(", or raise --timeout."), line


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href"):
                self.links.append(value)


def check_page(path: Path) -> _Links:
    """The page parses, needs no script, and links only files beside it or data: URIs."""
    parser = _Links()
    parser.feed(path.read_text())
    parser.close()
    assert "script" not in parser.tags and "img" in parser.tags
    for link in parser.links:
        assert "://" not in link, link  # nothing fetched from the network
        if not link.startswith("data:"):
            assert (path.parent / link).is_file(), link
    return parser


def test_sweep_of_train_py_writes_every_output_and_equals_single_runs(tmp_path):
    published = tmp_path / "measured.csv"
    published.write_text("replicas,throughput,label\n2,100000,lab run A\n4,150000,lab run B\n")
    # The program is compiled once (2 replicas, its own accumulation 1); the points need
    # accumulation 4 and 2 for the global batch of 64 at micro-batch 8; 12 is invalid.
    sweep = run(
        tmp_path, "poprun-emu-scaling", "--num-replicas", "2,4,12", "--num-instances", "1",
        "--strong", "--global-batch", "64", "--published", published, "--out", "out",
        TRAIN, "--micro-batch-size", "8",
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    out = tmp_path / "out"
    for name in ("report.html", "scaling.json", "scaling.csv", "throughput.png",
                 "efficiency.png", "phases.png", "memory.png"):  # fmt: skip
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    page = check_page(out / "report.html")
    assert {"throughput.png", "efficiency.png", "phases.png", "memory.png"} <= set(page.links)
    text = (out / "report.html").read_text()
    assert "lab run B" in text and "not a power of two" in text and "Amdahl" in text
    # A measured point that no fit used is a check, shown apart from calibration rows, and
    # every prediction carries its band.
    assert "Held-out rows (not used for fitting" in text and "Calibration rows" not in text
    assert hardware.load_calibration().method in text  # the cross-validated band's method

    doc = json.loads((out / "scaling.json").read_text())
    assert doc["mode"] == "strong" and doc["law"] == "amdahl"
    assert doc["command"].startswith("poprun-emu-scaling --num-replicas 2,4,12")
    assert doc["model_parameters"] and doc["series"][0]["analysis"]["fit"]
    rows = doc["series"][0]["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok", "invalid"]
    assert [r["gradient_accumulation"] for r in rows[:2]] == [4, 2]
    assert rows[0]["speedup"] == 1.0 and rows[0]["karp_flatt"] is None
    assert rows[1]["efficiency"] == pytest.approx(rows[1]["speedup"] / 2)
    # One meaning per key: a row's key that summary.json also has holds the same value.
    for row in rows[:2]:
        shared = set(row) & set(row["summary"])
        assert {"memory_per_ipu", "memory_per_ipu_total", "samples_per_second"} <= shared
        assert all(row[key] == row["summary"][key] for key in shared), shared
    assert doc["max_point_evaluation_seconds"] >= 0  # recorded; the time is a benchmark figure

    with open(out / "scaling.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows)
    for row, record in zip(rows, table, strict=True):
        assert record["status"] == row["status"] and record["reason"] == row["reason"]
        assert int(record["replicas"]) == row["replicas"]
        for key in ("samples_per_second", "simulated_step_seconds", "efficiency"):
            assert (float(record[key]) if record[key] else None) == row[key]
        for phase, seconds in row["phases"].items():
            assert float(record[f"phase_{phase}_seconds"]) == seconds

    # A single offline run of the 4-replica point (accumulation 2) reports the same step.
    single = run(
        tmp_path, "poprun-emu", "--offline-mode", "--num-replicas", "4", "--num-instances", "1",
        "--system", "pod16", "--report-dir", "single", TRAIN, "--micro-batch-size", "8",
        "--gradient-accumulation", "2",
    )  # fmt: skip
    assert single.returncode == 0, single.stderr[-3000:]
    summary = json.loads((tmp_path / "single" / "summary.json").read_text())
    assert doc["model_parameters"] == summary.pop("model_parameters")
    # The single run's provenance: the launcher's own command line reaches its reports.
    assert summary.pop("run")["command"].startswith(
        "poprun-emu --offline-mode --num-replicas 4 --num-instances 1 --system pod16"
    )
    assert rows[1]["summary"].pop("run") is None  # a sweep point was not run by a command
    # The same step on the IPUs. Whether the measured host work is exposed depends on this
    # machine's load at each measurement (two suites at once made the point host-bound).
    point = rows[1]["summary"]
    for report in (point, summary):
        host, ipu = report["host_bound_samples_per_second"], report["ipu_bound_samples_per_second"]
        assert report["host_bound"] == (host < ipu)
        phases = report["phases"]
        ipu_step = report["simulated_step_seconds"] - phases["host_compute"]
        assert ipu_step == pytest.approx(sum(phases.values()) - phases["host_compute"])
    # Each run measures the program's host work anew: the same fields, other measurements.
    for key in HOST_MEASURED:
        assert point.pop(key) and summary.pop(key), key
    assert point["ipu_bound_samples_per_second"] == summary["ipu_bound_samples_per_second"]
    host_dependent = ("host_bound", "uncertainty", "simulated_step_seconds", "samples_per_second")
    point_phases, single_phases = point.pop("phases"), summary.pop("phases")
    assert {k: v for k, v in point_phases.items() if k != "host_compute"} == {
        k: v for k, v in single_phases.items() if k != "host_compute"
    }
    assert {k: v for k, v in point.items() if k not in host_dependent} == {
        k: v for k, v in summary.items() if k not in host_dependent
    }
    check_page(tmp_path / "single" / "report.html")  # the single run's own page


def test_pipelined_sweep_has_a_bubble_phase_and_equals_a_single_run(tmp_path):
    """Pipelined replicas join the sweep: each point is the stages' schedule for that layout,
    its idle share a ``pipeline_bubble`` phase; a point whose accumulation falls below what a
    pipeline of 2 stages needs is reported invalid, not fatal."""
    sweep = run(
        tmp_path, "poprun-emu-scaling", "--num-replicas", "2,4,8", "--num-instances", "1",
        "--ipus-per-replica", "2", "--strong", "--global-batch", "64", "--out", "out",
        TRAIN, "--micro-batch-size", "4", "--gradient-accumulation", "8",
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    rows = json.loads((tmp_path / "out" / "scaling.json").read_text())["series"][0]["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok", "invalid"], [r["reason"] for r in rows]
    assert [r["gradient_accumulation"] for r in rows[:2]] == [8, 4]
    assert "gradient_accumulation=2 is too small" in rows[2]["reason"]
    for row in rows[:2]:
        assert row["phases"]["pipeline_bubble"] > 0 and row["summary"]["pipeline"]
    # The bubble's share of the pipeline grows as the accumulation falls (the ramp is
    # amortised over fewer micro-batches); it is the report's bubble fraction.
    share = [r["phases"]["pipeline_bubble"] / (r["phases"]["pipeline_bubble"] +
             r["phases"]["compute"]) for r in rows[:2]]  # fmt: skip
    assert share[1] > share[0]
    for row, fraction in zip(rows, share, strict=False):
        assert fraction == pytest.approx(row["summary"]["pipeline"]["bubble_fraction"])

    single = run(
        tmp_path, "poprun-emu", "--offline-mode", "--num-replicas", "4", "--num-instances", "1",
        "--ipus-per-replica", "2", "--system", rows[1]["system"], "--report-dir", "single",
        TRAIN, "--micro-batch-size", "4", "--gradient-accumulation", "4",
    )  # fmt: skip
    assert single.returncode == 0, single.stderr[-3000:]
    summary = json.loads((tmp_path / "single" / "summary.json").read_text())
    summary.pop("model_parameters")
    summary.pop("run")
    rows[1]["summary"].pop("run")
    for key in HOST_MEASURED:
        assert rows[1]["summary"].pop(key) and summary.pop(key), key
    assert rows[1]["summary"] == summary


def test_out_is_never_a_symlink_nor_in_a_directory_others_can_write(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    for out, needle in (("link", "is a symbolic link"), ("shared/o", "is world-writable")):
        result = run(tmp_path, "poprun-emu-scaling", "--num-replicas", "16", "--out", out, TRAIN)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and needle in result.stderr, result.stderr
    assert list(target.iterdir()) == [] and list(shared.iterdir()) == []


def test_series_logs_are_never_written_through_a_symlink(tmp_path):
    (tmp_path / "o" / "logs").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "o" / "logs" / "series-0.log").symlink_to(victim)
    result = run(tmp_path, "poprun-emu-scaling", "--num-replicas", "16", "--out", "o", TRAIN)
    assert result.returncode == 2 and "series-0.log' is a symbolic link" in result.stderr
    assert victim.read_text() == "keep\n"


SLEEPER = """
import os, sys, time
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)  # never reaches popdist_emu.simulate
"""


@pytest.mark.parametrize("signum", [2, 15, 1], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interrupted_sweep_ends_its_running_program(tmp_path, signum):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    pid_file = tmp_path / "program.pid"
    words = ["--num-replicas", "2", "--out", "o", "sleeper.py", pid_file]
    sweep = subprocess.Popen(
        # The signal's default disposition, also when the suite runs as a background job.
        with_default_signals([*command("poprun-emu-scaling"), *map(str, words)], signum),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        program = int(pid_file.read_text())
        sweep.send_signal(signum)
        assert sweep.wait(timeout=within(60)) == 128 + signum
        assert "interrupted; ended the running program" in sweep.stderr.read()
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{program}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{program}"), "the program outlived the sweep"
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()


def test_a_good_calibrate_from_file_is_refitted_once_and_every_point_uses_it(tmp_path):
    """``--calibrate-from`` with a good file: the refit prints the term it moved, the sweep
    is simulated with the refitted value, not the shipped one, and the refit's folder goes
    with the sweep."""
    (tmp_path / "runs.jsonl").write_text(
        json.dumps({"replicas": 2, "samples_per_second": 50_000, "label": "my run"}) + "\n"
    )
    (tmp_path / "tmp").mkdir()
    sweep = subprocess.run(
        [*command("poprun-emu-scaling"), "--num-replicas", "2,4", "--calibrate-from",
         "runs.jsonl", "--out", "out", str(TRAIN), "--micro-batch-size", "8"],
        capture_output=True, text=True, timeout=within(300), cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    changed = [line for line in sweep.stdout.splitlines() if " -> " in line]
    assert len(changed) == 1 and changed[0].startswith("[poprun-emu-scaling] --calibrate-from: ")
    name, values = changed[0].split("--calibrate-from: ", 1)[1].split(" ", 1)
    old, new = (float(v) for v in values.split(" -> "))
    assert not math.isclose(old, new)
    doc = json.loads((tmp_path / "out" / "scaling.json").read_text())
    # The sweep's parameters are read from its run's own summary.json: what it simulated with.
    assert doc["model_parameters"][name] == pytest.approx(new, rel=1e-3)
    assert [r["status"] for r in doc["series"][0]["rows"]] == ["ok", "ok"]
    assert os.listdir(tmp_path / "tmp") == []  # the refitted file went with the sweep
