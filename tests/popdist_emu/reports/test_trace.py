"""trace.json against the Trace Event Format: every event with its arguments, each IPU and
link tier one track, several steps of a run, and each instance's host from a real run.

Perfetto's trace processor (the ``perfetto`` package) downloads its binary on first use,
which the suite may not do, so the trace is checked against the format's specification.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from deadlines import within
from pipelined_replica import four_stages, simulate_pipeline

import hardware
from popdist_emu._host_timeline import HostTimeline, collect, publish
from popdist_emu.reports._trace import chrome_trace

TRAIN = Path(__file__).parents[3] / "examples" / "train.py"


def check_trace_event_format(trace: dict) -> dict[tuple[int, int], str]:
    """Fails on anything the Trace Event Format's JSON object form does not allow, or that
    Perfetto's details pane would show empty; returns each (pid, tid)'s track name."""
    assert set(trace) <= {"traceEvents", "displayTimeUnit", "otherData"}
    assert trace["displayTimeUnit"] in ("ms", "ns")
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    for e in trace["traceEvents"]:
        assert e["ph"] in ("X", "C", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["name"], str) and e["name"]
        if e["ph"] == "M":
            assert e["name"] in (
                "process_name",
                "thread_name",
                "process_sort_index",
                "thread_sort_index",
            )
            if e["name"] == "process_name":
                assert e["pid"] not in processes, f"process {e['pid']} named twice"
                processes[e["pid"]] = e["args"]["name"]
            if e["name"] == "thread_name":
                key = (e["pid"], e["tid"])
                assert key not in threads, f"thread {key} named twice"
                threads[key] = e["args"]["name"]
        elif e["ph"] == "X":
            assert isinstance(e["tid"], int)
            assert e["ts"] >= 0 and e["dur"] >= 0  # microseconds
            assert e["args"] and "seconds" in e["args"], e  # the details pane has content
            json.dumps(e["args"])  # plain JSON values
        else:  # "C": a counter's series, numbers only
            assert e["ts"] >= 0 and all(isinstance(v, int | float) for v in e["args"].values())
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in threads, f"an event on an unnamed track: {e}"
            assert e["pid"] in processes
    for pid in processes:  # a track name appears once per process
        names = [name for (p, _), name in threads.items() if p == pid]
        assert len(names) == len(set(names)), names
    return threads


def test_every_event_has_its_arguments_and_each_track_is_named_once(simulation, toy_profile):
    sim = simulation
    trace = chrome_trace(sim)
    threads = check_trace_event_format(trace)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(sim.run_events)
    by_name = {e["name"]: e["args"] for e in complete}
    assert (
        by_name["compute"]["flops"] == toy_profile.grad_flops
        and "micro_batch" in by_name["compute"]
    )
    reduce = by_name["all_reduce"]
    assert (reduce["kind"], reduce["group"], reduce["bytes"]) == ("all_reduce", "all", 50_000_000)
    assert reduce["method"] == "clockwise_ring" and reduce["tier"] in ("IPU-Links", "GW-Links")
    assert by_name["host_io"]["bytes_per_replica"] == toy_profile.host_bytes_per_micro_batch
    assert set(threads.values()) >= {"IPU 0 (replica 0)", "IPU-Links", "GW-Links", "Host sync"}


def test_the_trace_shows_several_steps_and_the_first_one_waits_for_its_data(
    simulation, toy_profile
):
    sim = simulation
    complete = [e for e in chrome_trace(sim)["traceEvents"] if e["ph"] == "X"]
    steps = sorted({e["args"]["step"] for e in complete})
    assert len(steps) >= 2
    first_compute = {
        s: min(e["ts"] for e in complete if e["name"] == "compute" and e["args"]["step"] == s)
        for s in steps
    }
    first_io = {
        s: min(e["ts"] for e in complete if e["name"] == "host_io" and e["args"]["step"] == s)
        for s in steps
    }
    io_us = sim.host_io_seconds * 1e6 / toy_profile.gradient_accumulation
    # Step 0 computes the moment its first micro-batch has crossed the host link; in the last
    # step that micro-batch was prefetched while the IPUs were still busy.
    waited = [first_compute[s] - (first_io[s] + io_us) for s in steps]
    assert waited[0] == pytest.approx(0, abs=1e-6)
    assert waited[-1] > 1.0  # microseconds of slack: the data was there before it was needed


def test_a_pipelined_replica_has_one_track_per_ipu_with_its_stages():
    stages = four_stages()
    profile = hardware.StepProfile(
        grad_flops=1e9, grad_bytes_accessed=1e8, micro_batch_size=4, gradient_accumulation=8,
        host_bytes_per_micro_batch=100_000, name="four-stages",
    )  # fmt: skip
    sim = simulate_pipeline(profile, stages, hardware.ReplicaLayout(4, 2, ipus_per_replica=4))
    trace = chrome_trace(sim)
    threads = check_trace_event_format(trace)
    ipus = [name for name in threads.values() if name.startswith("IPU ") and "(replica 0)" in name]
    assert ipus == [f"IPU {i} (replica 0)" for i in range(4)]  # IPU 0 once, not twice
    passes = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["args"].get("pass")]
    assert {e["args"]["stage"] for e in passes} == {0, 1, 2, 3}
    assert all(e["args"]["blocks"] == f"B{e['args']['stage']}" for e in passes)
    assert any(e["ph"] == "C" for e in trace["traceEvents"])  # memory live per IPU


def test_instance_zero_collects_the_others_and_names_the_late(tmp_path):
    (tmp_path / "instance-0.pid").write_text("1 1\n")
    (tmp_path / "instance-1.pid").write_text("2 2\n")
    (tmp_path / "instance-2.pid").write_text("3 3\n")
    publish(str(tmp_path), 1)
    spans, missing = collect(str(tmp_path), 0, wait_seconds=0.2)
    assert sorted(spans) == [0, 1] and missing == [2]
    timeline = HostTimeline()
    with timeline.span("compile", program="p"):
        pass
    (span,) = timeline.spans()
    assert span["name"] == "compile" and span["args"] == {"program": "p"} and span["seconds"] >= 0


@pytest.mark.skipif(shutil.which("poprun-emu") is None, reason="poprun-emu is not installed")
def test_a_real_run_puts_each_instances_host_beside_the_simulation(tmp_path):
    proc = subprocess.run(
        ["poprun-emu", "--num-replicas", "4", "--num-instances", "2", "--report-dir", "r",
         str(TRAIN), "--steps", "3"],
        capture_output=True, text=True, timeout=within(300), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    trace = json.loads((tmp_path / "r" / "trace.json").read_text())
    check_trace_event_format(trace)
    assert "otherData" not in trace  # both timelines arrived
    names = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"
    }
    assert names[100].startswith("instance 0: host") and names[101].startswith("instance 1: host")
    for pid in (100, 101):
        spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]
        assert any(e["name"] == "compile" and e["args"]["program"] for e in spans)
        reduces = [e for e in spans if e["name"] == "all_reduce"]
        assert len(reduces) == 3  # one per step, as gcl ran it
        assert {"method", "group", "bytes"} <= set(reduces[0]["args"])
        assert sum(e["name"] == "micro-steps" for e in spans) == 3
