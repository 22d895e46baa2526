"""Every key ``summary.json`` and ``trace.json`` hold is named in docs/reference/reports.md.

The page is written by hand from the code (there is no schema to generate it from), so this
test reads the keys the code really writes, for a plain step with a convolution planned, a
pipelined replica and a run's provenance, and fails on any the page does not name.
"""

import dataclasses
import datetime

from pipelined_replica import four_stages, simulate_pipeline
from repo_scripts import ROOT

import hardware
from popdist_emu.reports._run_info import run_info
from popdist_emu.reports._summary import summary
from popdist_emu.reports._trace import chrome_trace

PAGE = (ROOT / "docs" / "reference" / "reports.md").read_text()
# Objects whose keys are names documented elsewhere: the model's parameters (the API
# reference of hardware.ModelParameters) and the versions (distribution names).
OPAQUE = {"model_parameters", "versions"}


def _keys(value, path=""):
    """Every key of ``value``'s objects, with where it was found."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key, f"{path}.{key}"
            if key not in OPAQUE:
                yield from _keys(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item, f"{path}[]")


def _undocumented(document):
    return sorted(
        {
            where
            for key, where in _keys(document)
            # available_memory's keys are the IPUs' names (IPU0, ...), as the page says
            if f"`{key}`" not in PAGE and not key.startswith("IPU")
        }
    )


def _simulations(toy_profile):
    conv = hardware.ConvOp("conv", "conv", 1, 20 * 56 * 56, 256, 576, 64)
    planned = hardware.simulate_step(
        dataclasses.replace(toy_profile, matmuls=(conv,)),
        hardware.ReplicaLayout(128, 64),
        hardware.get_system("pod128"),
    )
    profile = dataclasses.replace(toy_profile, gradient_accumulation=8, name="four-stages")
    pipelined = simulate_pipeline(
        profile, four_stages(scale=lambda i: 1 + i), hardware.ReplicaLayout(4, 2, 4)
    )
    return planned, pipelined


def test_every_key_summary_json_writes_is_documented(toy_profile):
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    for simulation in _simulations(toy_profile):
        document = summary(simulation, run_info("poprun-emu train.py", when))
        assert document["pipeline"] or document["available_memory"]["IPU0"]["planner"]
        assert _undocumented(document) == []


def test_every_key_and_event_trace_json_writes_is_documented(toy_profile):
    span = {"name": "compile", "start": 0.0, "seconds": 1.0, "args": {"program": "step"}}
    for simulation in _simulations(toy_profile):
        trace = chrome_trace(simulation, {0: [span]}, missing=[1])
        assert _undocumented({k: v for k, v in trace.items() if k != "traceEvents"}) == []
        events = trace["traceEvents"]
        args = {key for event in events for key in event.get("args", {})} - {"program"}
        fields = {key for event in events for key in event}
        named = {event["name"] for event in events if event["ph"] == "M"}
        kinds = {event["ph"] for event in events}
        for word in sorted(args | fields | named | kinds):
            assert f"`{word}`" in PAGE, word


def test_the_check_sees_an_undocumented_key():
    assert _undocumented({"system": "pod16", "no_such_key": {"replicas": 1}}) == [".no_such_key"]
