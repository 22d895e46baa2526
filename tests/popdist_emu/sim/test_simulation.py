"""popdist_emu.simulate / simulate_profile / with_infeed_stats / report_simulation, in-process
and through poprun-emu with examples/train.py (functional, offline, 65,536 replicas, OOM)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from deadlines import within

import hardware
import popdist_emu
from contract import ENV_REPORT_DIR, layout_environment

TRAIN = Path(__file__).parents[3] / "examples" / "train.py"
SUMMARY_KEYS = (
    "system",
    "replicas",
    "simulated_step_seconds",
    "samples_per_second",
    "phases",
    "memory_per_ipu",
    "host_io_exposed_seconds",
)


def loss_fn(params, batch):
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


PARAMS = {"w": np.ones((6, 3), np.float32), "b": np.zeros((3,), np.float32)}


def make_trainer(offline: bool, replicas: int = 4, optimiser=None, **option_kwargs):
    env = {"POPDIST_EMU_OFFLINE": "1" if offline else "0"}
    with mock.patch.dict(os.environ, env):
        options = popdist_emu.Options(replication_factor=replicas, **option_kwargs)
        return popdist_emu.Trainer(loss_fn, optimiser or optax.sgd(0.1), PARAMS, options)


def shapes(options, micro: int, x_dtype=jnp.float32):
    lead = (options.device_iterations, options.gradient_accumulation, options.replication_factor)
    return (
        jax.ShapeDtypeStruct((*lead, micro, 6), x_dtype),
        jax.ShapeDtypeStruct((*lead, micro, 3), jnp.float32),
    )


def arrays(options, micro: int):
    return tuple(np.zeros(s.shape, s.dtype) for s in shapes(options, micro))


def test_offline_and_functional_trainers_simulate_the_same_step():
    functional = make_trainer(False, gradient_accumulation=2)
    offline = make_trainer(True, gradient_accumulation=2)
    real = popdist_emu.simulate(functional, arrays(functional.options, 8))
    shaped = popdist_emu.simulate(offline, shapes(offline.options, 8))
    assert real.simulated_step_seconds == shaped.simulated_step_seconds
    assert real.phases == shaped.phases
    assert real.memory == shaped.memory
    # Outside PopRun the trainer's 4 replicas run on one instance of the default system.
    assert (real.layout.num_replicas, real.layout.num_instances) == (4, 1)
    assert real.system.name == "pod16"
    assert real.samples_per_step == 4 * 2 * 8
    assert real.prefetch_depth == functional.options.prefetch_depth
    shallow = make_trainer(True, gradient_accumulation=2, prefetch_depth=1)
    assert popdist_emu.simulate(shallow, shapes(shallow.options, 8)).prefetch_depth == 1


def test_system_comes_from_the_options_or_the_argument():
    trainer = make_trainer(True, system="bow-pod64")
    batch = shapes(trainer.options, 2)
    assert popdist_emu.simulate(trainer, batch).system.name == "bow-pod64"
    assert popdist_emu.simulate(trainer, batch, system="pod128").system.name == "pod128"
    with mock.patch.dict(os.environ, {"POPDIST_EMU_SYSTEM": "bow-pod16"}):
        # The launcher's --system, read once with the layout when the options are made.
        assert popdist_emu.simulate(make_trainer(True), batch).system.name == "bow-pod16"
    with pytest.raises(hardware.SystemSelectionError, match="is not a known IPU-POD"):
        popdist_emu.simulate(make_trainer(True, system="pod99"), batch)


def test_oversized_micro_batch_is_out_of_memory():
    trainer = make_trainer(True, replicas=1)
    with pytest.raises(hardware.OutOfMemoryError, match=r"^Out of memory:"):
        popdist_emu.simulate(trainer, shapes(trainer.options, 20_000_000))


def test_memory_levers_reach_the_simulation():
    def run(**levers):
        trainer = make_trainer(True, replicas=4, optimiser=optax.adam(0.1), **levers)
        return popdist_emu.simulate(trainer, shapes(trainer.options, 2))

    plain, rts, offload = run(), run(replicated_tensor_sharding=True), run(offload_optimiser=True)
    state = plain.memory.categories["optimizer_state"]
    assert state > 0
    assert rts.memory.categories["optimizer_state"] < state
    assert rts.phases["reduce_scatter"] > 0 and rts.phases["all_gather"] > 0
    assert offload.memory.categories["optimizer_state"] < state
    assert offload.phases["streaming"] > 0 and plain.phases["streaming"] == 0


def test_infeed_stats_set_the_host_bytes():
    trainer = make_trainer(False, replicas=2)
    options = trainer.options
    simulation = popdist_emu.simulate(trainer, arrays(options, 4))
    per_micro = simulation.profile.host_bytes_per_micro_batch
    assert per_micro == 4 * (6 + 3) * 4

    def produce(i, dtype=np.float32):
        return (np.zeros(shapes(options, 4)[0].shape, dtype), np.zeros((1, 1, 2, 4, 3), dtype))

    with popdist_emu.Infeed(produce, 3, prefetch_depth=1) as feed:
        for _ in feed:
            pass
        same = feed.stats
    measured = popdist_emu.with_infeed_stats(simulation, same)
    assert measured.profile.host_bytes_per_micro_batch == per_micro  # the shapes were right
    # The workers' CPU per sample: 2 items (the first left out) of 2 replicas x 4 samples.
    per_sample = (same.produce_cpu_seconds - same.first_cpu_seconds) / (2 * 2 * 4)
    assert measured.profile.host_cpu_seconds_per_sample == pytest.approx(per_sample)
    assert measured.profile.host_workers == 1 and measured.host_compute_seconds > 0

    # The same call sent as uint8 (the infeed's data-size reduction): a quarter of the bytes.
    with popdist_emu.Infeed(lambda i: produce(i, np.uint8), 3, prefetch_depth=1) as feed:
        for _ in feed:
            pass
        small = feed.stats
    smaller = popdist_emu.with_infeed_stats(simulation, small)
    assert smaller.profile.host_bytes_per_micro_batch == per_micro // 4
    assert smaller.host_io_seconds < simulation.host_io_seconds


def test_simulate_profile_takes_the_job_of_its_options():
    trainer = make_trainer(True, replicas=1)
    profile = popdist_emu.simulate(trainer, shapes(trainer.options, 2)).profile
    env = {
        "POPDIST_NUM_TOTAL_REPLICAS": "64",
        "POPDIST_NUM_LOCAL_REPLICAS": "8",
        "POPDIST_NUM_IPUS_PER_REPLICA": "1",
    }
    with mock.patch.dict(os.environ, env):
        launched = popdist_emu.Options()  # the launcher's layout, read at the program's entry
    simulation = popdist_emu.simulate_profile(profile, launched)
    assert (simulation.layout.num_replicas, simulation.layout.num_instances) == (64, 8)
    assert simulation.system.name == "pod64"
    given = popdist_emu.Options(layout=hardware.ReplicaLayout(16, 4), system="bow-pod16")
    other = popdist_emu.simulate_profile(profile, given)
    assert (other.layout, other.system.name) == (given.layout, "bow-pod16")


def test_report_from_instance_0_only(tmp_path, capsys):
    trainer = make_trainer(True)
    simulation = popdist_emu.simulate(trainer, shapes(trainer.options, 2))
    job = hardware.ReplicaLayout(num_replicas=4, num_instances=2)
    others = popdist_emu.Options(layout=job, instance_index=1, report_dir=str(tmp_path / "x"))
    assert popdist_emu.report_simulation(simulation, others) is None
    assert capsys.readouterr().out == "" and not (tmp_path / "x").exists()

    launched = {**layout_environment(job, 0), ENV_REPORT_DIR: str(tmp_path / "r")}
    with mock.patch.dict(os.environ, launched):
        leader = popdist_emu.Options()  # instance 0, with the launcher's --report-dir
    assert popdist_emu.report_simulation(simulation, leader) == str(tmp_path / "r")
    assert "[popdist-emu] simulated pod16" in capsys.readouterr().out
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["simulated_step_seconds"] == simulation.simulated_step_seconds
    # No directory asked for: the summary is printed and nothing is written.
    assert popdist_emu.report_simulation(simulation, popdist_emu.Options(layout=job)) is None


# ------------------------------------------------------------ through poprun-emu


def poprun(cwd, *words, timeout=180):
    script = shutil.which("poprun-emu")
    command = [script] if script else [sys.executable, "-m", "launch"]
    return subprocess.run(
        [*command, *words], capture_output=True, text=True, timeout=within(timeout), cwd=cwd
    )


def final_line(stdout: str) -> dict:
    line = stdout.strip().splitlines()[-1]
    return json.loads(line[line.index("{") :])


# What a run measures of its host: two runs measure it apart.
HOST_MEASURED = (
    "host_compute_seconds",
    "host_cpu_seconds_per_sample",
    "host_bound_samples_per_second",
    "ipu_bound_samples_per_second",
)


def test_functional_and_offline_runs_report_the_same_step(tmp_path):
    layout = ("--num-replicas", "4", "--num-instances", "2")
    args = (str(TRAIN), "--steps", "2", "--micro-batch-size", "4")
    functional = poprun(tmp_path, *layout, "--report-dir", "fun", *args)
    assert functional.returncode == 0, functional.stderr[-2000:]
    # Start-up smoke test: instance 0 names the compilation, then prints its first step.
    err = functional.stderr
    assert "[1,0]<stderr>:[popdist-emu] compiling the replica's micro-step ..." in err
    assert err.index("compiling the replica's micro-step") < err.index("step 1/2 loss ")
    assert "[1,1]<stderr>:[popdist-emu]" not in err and "[1,1]<stderr>:step" not in err
    offline = poprun(tmp_path, "--offline-mode", *layout, "--report-dir", "off", *args)
    assert offline.returncode == 0, offline.stderr[-2000:]

    summary = json.loads((tmp_path / "fun" / "summary.json").read_text())
    for key in SUMMARY_KEYS:
        assert key in summary
    assert {"compute", "allreduce"} <= set(summary["phases"])
    assert summary["replicas"] == 4 and summary["system"] == "pod16"
    # The same step on the IPUs; only the host's measured cost differs between the two runs:
    # offline there is no infeed, while a functional run's host compute may be exposed when
    # this machine's CPU is slow against the simulated step (a loaded CI runner's was).
    offline_summary = json.loads((tmp_path / "off" / "summary.json").read_text())
    phases, offline_phases = dict(summary["phases"]), dict(offline_summary["phases"])
    exposed_host = phases.pop("host_compute")
    assert offline_phases.pop("host_compute") == 0.0 and exposed_host >= 0.0
    assert offline_phases == pytest.approx(phases, rel=1e-9, abs=1e-15)
    ipu_step = summary["simulated_step_seconds"] - exposed_host
    # Whether host-bound depends on this machine's speed; the IPUs' figure does not.
    host, ipu = summary["host_bound_samples_per_second"], summary["ipu_bound_samples_per_second"]
    assert summary["host_bound"] == (host < ipu)
    assert ipu == pytest.approx(offline_summary["samples_per_second"], rel=1e-9)
    # The band's width is the calibration's; its ends follow the (host-measured) throughput.
    band = ("method", "calibration", "relative")
    assert {k: offline_summary["uncertainty"][k] for k in band} == {
        k: summary["uncertainty"][k] for k in band
    }
    measured = (
        *HOST_MEASURED,
        "host_bound",
        "uncertainty",
        "simulated_step_seconds",
        "samples_per_second",
        "phases",
        "run",
    )
    for key in measured:
        assert (offline_summary.pop(key) is None) == (summary[key] is None), key
    assert offline_summary == {k: v for k, v in summary.items() if k not in measured}
    assert summary["host_cpu_seconds_per_sample"] > 0

    trace = json.loads((tmp_path / "fun" / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and {"ts", "pid", "tid"} <= set(e) for e in spans)

    for run, report in ((functional, summary), (offline, None)):
        assert "[popdist-emu] simulated pod16" in run.stdout
        line = final_line(run.stdout)
        expected = report or json.loads((tmp_path / "off" / "summary.json").read_text())
        assert line["simulated_step_seconds"] == expected["simulated_step_seconds"]
        assert line["samples_per_second"] == expected["samples_per_second"]
        # The IPUs' step, plus what this run's host compute exposed.
        exposed = exposed_host if report else 0.0
        assert line["simulated_step_seconds"] == pytest.approx(ipu_step + exposed, rel=1e-9)


def test_offline_65536_replicas_picks_the_largest_pod(tmp_path):
    run = poprun(
        tmp_path,
        "--offline-mode",
        "--num-replicas",
        "65536",
        "--num-instances",
        "2048",
        "--report-dir",
        "r",
        str(TRAIN),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (summary["system"], summary["replicas"], summary["instances"]) == (
        "pod65536",
        65536,
        2048,
    )
    assert final_line(run.stdout)["samples_per_second"] == summary["samples_per_second"]


def test_oversized_micro_batch_fails_the_run(tmp_path):
    run = poprun(
        tmp_path,
        "--offline-mode",
        "--num-replicas",
        "4",
        "--num-instances",
        "2",
        str(TRAIN),
        "--micro-batch-size",
        "100000",
    )
    assert run.returncode != 0
    assert "Out of memory:" in run.stderr
    assert "Remedies:" in run.stderr


def test_simulated_system_is_the_one_simulate_picks():
    assert popdist_emu.simulated_system(16).name == hardware.default_system(16).name
    bow = popdist_emu.simulated_system(16, "bow-pod64")
    assert (bow.name, bow.num_ipus) == ("bow-pod64", 64)
    assert popdist_emu.simulated_system(4, "pod16").name == "pod16"
    with pytest.raises(hardware.SystemSelectionError, match="has only 16 IPUs"):
        popdist_emu.simulated_system(32, "pod16")
