"""popdist_emu.sim._point and the request (contract._sweep): a sweep from one replica.

Each point must equal what ``popdist_emu.simulate`` reports for a trainer built for that
layout (what a single offline run computes), RTS included; invalid and out-of-memory points
come back with their reason instead of stopping the sweep.
"""

import json
import os
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import hardware
import popdist_emu
from contract import (
    COLLECTIVE_PHASES,
    ENV_OFFLINE,
    ENV_SCALING_REQUEST,
    SweepPoint,
    layout_environment,
    read_request,
    system_name,
    write_request,
)
from popdist_emu.reports import summary
from popdist_emu.scaling._config import EvaluatedPoint
from popdist_emu.sim import _point as points


def loss_fn(params, batch):
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


PARAMS = {"w": np.ones((64, 32), np.float32), "b": np.zeros((32,), np.float32)}
MICRO = 4


def environment(replicas: int, instances: int) -> dict[str, str]:
    layout = hardware.ReplicaLayout(num_replicas=replicas, num_instances=instances)
    return {**layout_environment(layout, 0), ENV_OFFLINE: "1"}


def trainer_and_batch(accumulation: int, rts: bool):
    options = popdist_emu.Options(
        gradient_accumulation=accumulation, replicated_tensor_sharding=rts
    )
    trainer = popdist_emu.Trainer(loss_fn, optax.adam(1e-3), PARAMS, options)
    lead = (1, accumulation, options.replication_factor)
    batch = (
        jax.ShapeDtypeStruct((*lead, MICRO, 64), jnp.float32),
        jax.ShapeDtypeStruct((*lead, MICRO, 32), jnp.float32),
    )
    return trainer, batch


def single_run(replicas, instances, accumulation, rts):
    """What a single offline run of that configuration reports (summary.json's content)."""
    env = environment(replicas, instances)
    with mock.patch.dict(os.environ, env):
        trainer, batch = trainer_and_batch(accumulation, rts)
        return summary(popdist_emu.simulate(trainer, batch))


@pytest.mark.parametrize("rts", [False, True])
def test_every_point_equals_a_single_run_of_its_layout(tmp_path, rts):
    # (replicas, instances, global batch): accumulation 8, 2 and 1 at micro-batch 4.
    layouts = [(2, 1, 64), (8, 2, 64), (16, 4, 64)]
    request = tmp_path / "request.json"
    result = tmp_path / "result.json"
    asked = [SweepPoint(r, n, 1, "pod16", b) for r, n, b in layouts]
    write_request(str(request), asked, str(result))
    assert read_request(str(request)) == (asked, str(result))
    env = {**environment(2, 1), ENV_SCALING_REQUEST: str(request)}
    with mock.patch.dict(os.environ, env):
        trainer, batch = trainer_and_batch(1, rts)  # the program's own accumulation: 1
    assert trainer.options.scaling_request == str(request)  # read once, with the layout
    popdist_emu.simulate(trainer, batch)
    answer = json.loads(result.read_text())
    assert answer["micro_batch_size"] == MICRO
    for (r, n, b), point in zip(layouts, answer["points"], strict=True):
        assert point["status"] == "ok", point["reason"]
        assert point["evaluation_seconds"] >= 0  # recorded; timed by benchmarks, not here
        expected = single_run(r, n, b // (r * MICRO), rts)
        assert point["summary"] == expected
        # The tiers split exactly the collectives' time.
        collectives = sum(expected["phases"][k] for k in COLLECTIVE_PHASES)
        assert sum(point["link_tiers"].values()) == pytest.approx(collectives, rel=1e-12)
    if rts:  # the sharding domain follows the layout (local replicas by default)
        assert [p["summary"]["memory_per_ipu"]["optimizer_state"] for p in answer["points"]] != [
            answer["points"][0]["summary"]["memory_per_ipu"]["optimizer_state"]
        ] * 3


PROFILE = hardware.StepProfile(
    grad_flops=1e9,
    grad_bytes_accessed=1e8,
    parameter_bytes=10_000_000,
    optimiser_state_bytes=20_000_000,
    gradient_bytes=10_000_000,
    activation_bytes=50_000_000,
    host_bytes_per_micro_batch=600_000,
    micro_batch_size=8,
    collectives=(hardware.CollectiveRecord("all_reduce", "clockwise_ring", "all", 10_000_000),),
)


def point(replicas, instances=1, system="", global_batch=None):
    return SweepPoint(replicas, instances, 1, system, global_batch)


def test_invalid_points_carry_their_reason():
    cases = {
        "not a power of two": point(12),
        "not divisible by --num-instances": point(16, 3),
        "has only 16 IPUs": point(64, system="pod16"),
        "is not a multiple of 16 replicas x micro-batch 8": point(16, global_batch=100),
    }
    for reason, p in cases.items():
        result = points.evaluate_point(hardware.as_replica(PROFILE), p)
        assert result["status"] == "invalid"
        assert reason in result["reason"] and "\n" not in result["reason"]
        assert "summary" not in result


def test_out_of_memory_point_is_kept_with_its_simulation():
    big = PROFILE.replace(activation_bytes=2 * 10**9)
    result = points.evaluate_point(hardware.as_replica(big), point(16))
    assert result["status"] == "out_of_memory"
    assert result["reason"].startswith("Out of memory:")
    assert result["summary"]["fits_in_memory"] is False
    ok = points.evaluate_point(hardware.as_replica(PROFILE), point(16, global_batch=16 * 8 * 4))
    assert ok["status"] == "ok" and ok["summary"]["gradient_accumulation"] == 4


def test_system_name_follows_the_ipu():
    assert system_name("mk2", "", 64) == "pod64"
    assert system_name("bow", "", 100) == "bow-pod128"
    assert system_name("bow", "pod256", 100) == "pod256"
    with pytest.raises(hardware.SystemSelectionError):
        system_name("mk2", "", 10**9)


def test_no_request_no_work(tmp_path):
    points.answer_request(hardware.as_replica(PROFILE), "", prefetch_depth=None)  # none asked
    assert list(tmp_path.iterdir()) == []


def test_a_bow_point_equals_a_single_run_on_that_system(tmp_path):
    request, result = tmp_path / "request.json", tmp_path / "result.json"
    write_request(str(request), [SweepPoint(8, 2, 1, "bow-pod16")], str(result))
    env = {**environment(2, 1), ENV_SCALING_REQUEST: str(request)}
    with mock.patch.dict(os.environ, env):
        trainer, batch = trainer_and_batch(1, False)
    popdist_emu.simulate(trainer, batch)
    (answer,) = json.loads(result.read_text())["points"]
    single_env = {**environment(8, 2), "POPDIST_EMU_SYSTEM": "bow-pod16"}
    with mock.patch.dict(os.environ, single_env):
        trainer, batch = trainer_and_batch(1, False)
    expected = summary(popdist_emu.simulate(trainer, batch))
    assert expected["system"] == "bow-pod16" and answer["summary"] == expected


def test_invalid_and_out_of_memory_points_are_reported_not_fatal(tmp_path):
    from popdist_emu.scaling._report import narrative, write_outputs
    from popdist_emu.scaling._table import analyse_series, series_rows

    big = PROFILE.replace(activation_bytes=2 * 10**9)
    specs = [point(16), point(64), point(12), point(256)]
    evaluated = [
        EvaluatedPoint(
            p, points.evaluate_point(hardware.as_replica(big if p.replicas == 256 else PROFILE), p)
        )
        for p in specs
    ]
    rows = series_rows("synthetic", evaluated)
    assert [r["status"] for r in rows] == ["ok", "ok", "invalid", "out_of_memory"]
    assert rows[3]["fits_in_memory"] is False and rows[3]["speedup"] is None
    series = {"label": "synthetic", "rows": rows, "analysis": analyse_series(rows, "amdahl"),
              "error": ""}  # fmt: skip
    lines = narrative(series)
    assert any(line.startswith("12 replicas: invalid:") for line in lines)
    assert any(line.startswith("256 replicas: out of memory: Out of memory:") for line in lines)
    doc = {"command": "test", "mode": "strong", "law": "amdahl", "model": "synthetic",
           "sweep_seconds": 0.0, "num_points": 4, "published": [], "series": [series]}  # fmt: skip
    paths = write_outputs(doc, tmp_path)
    text = paths["html"].read_text()
    assert "out_of_memory: Out of memory:" in text and "not a power of two" in text
    assert paths["csv"].read_text().count("\n") == 5  # header and 4 points


def test_a_point_with_parameters_is_simulated_with_them(tmp_path):
    # benchmarks/row_features.py probes a row's step at several parameter values this way.
    values = (("compute_efficiency", 0.05), ("host_sync_seconds", 0.01))
    request, result = tmp_path / "request.json", tmp_path / "result.json"
    write_request(str(request), [SweepPoint(16, 1, 1, "", parameters=values)], str(result))
    (read,), _ = read_request(str(request))
    assert read.parameters == values
    model = hardware.as_replica(PROFILE)
    answer = points.evaluate_point(model, read)
    layout = hardware.ReplicaLayout(num_replicas=16, num_instances=1)
    parameters = hardware.ModelParameters(
        **{**hardware.load_parameters().to_json(), **dict(values)}
    )
    expected = hardware.simulate_step(
        model, layout, hardware.get_system("pod16"), parameters=parameters
    )
    assert answer["summary"]["simulated_step_seconds"] == pytest.approx(
        expected.simulated_step_seconds, rel=1e-12
    )
    plain = points.evaluate_point(model, point(16))["summary"]["simulated_step_seconds"]
    assert plain < expected.simulated_step_seconds  # a slower chip and host: a longer step
    wrong = points.evaluate_point(model, SweepPoint(16, 1, 1, "", parameters=(("speed", 1.0),)))
    assert wrong["status"] == "invalid" and "speed" in wrong["reason"]
