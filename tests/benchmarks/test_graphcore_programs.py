"""benchmarks/graphcore_programs.py: how it launches Graphcore's vision applications (the
runs themselves are the benchmark's, minutes each)."""

import json
import subprocess
import sys

from deadlines import within
from repo_scripts import BENCHMARKS, load_benchmark

programs = load_benchmark("graphcore_programs")


def test_functional_runs_keep_the_replicas_and_the_global_data_set_on_two_instances():
    resnet50 = programs.PROGRAMS["resnet50"]
    assert programs._launch_options(resnet50, "functional", 2) == [
        "--num-replicas", "2", "--num-instances", "2",
    ]  # fmt: skip
    one = programs._scaled(resnet50.args, resnet50, 1)
    two = programs._scaled(resnet50.args, resnet50, 2)
    at = one.index("--iterations")
    assert (one[at + 1], two[at + 1]) == ("4", "8")
    assert [w for i, w in enumerate(two) if i != at + 1] == [
        w for i, w in enumerate(one) if i != at + 1
    ]


def test_offline_runs_take_the_published_rows_options():
    vit = programs.PROGRAMS["vit"]
    words = programs._launch_options(vit, "offline")
    assert "--offline-mode" in words and "bow-pod64" in words
    assert words[words.index("--num-instances") + 1] == "8"
    # Eight symmetric instances: one compiles for all (eight compiles on two cores did not end).
    assert words[-1] == "--offline-representative"
    assert "--offline-representative" not in programs._launch_options(vit, "functional", 2)
    assert "b16_in1k_pretrain_lamb" in vit.offline_args


def test_the_efficientnet_offline_run_is_the_row_c4_s_system_and_global_batch():
    """C4 (TensorFlow 1, micro-batch 3 x accumulation 256 on 8 replicas of 2 IPUs of a
    Bow-POD16) through the PyTorch program's configuration, whose mixup with cutmix needs
    micro-batch 4: the same replicas, system and global batch, one step a call."""
    effnet = programs.PROGRAMS["efficientnet"]
    assert effnet.published == "C4"
    row = programs.calibration_set.all_rows()["C4"].words.split()
    poprun = programs.calibration_set.all_rows()["C4"].launch.split()
    ours = programs._launch_options(effnet, "offline")
    for flag in ("--system", "--num-replicas", "--ipus-per-replica"):
        assert ours[ours.index(flag) + 1] == poprun[poprun.index(flag) + 1], flag

    def value(words, flag):
        return int(words[words.index(flag) + 1])

    args = list(effnet.offline_args)
    micro_batch = 4  # configs.yml's efficientnet-b4-g16-gn-pod16
    assert "--micro-batch-size" not in args and "efficientnet-b4-g16-gn-pod16" in args
    assert micro_batch * value(args, "--gradient-accumulation") == value(
        row, "--micro-batch-size"
    ) * value(row, "--gradient-accumulation")
    assert value(args, "--device-iterations") == value(row, "--device-iterations") == 1


def test_same_losses_compares_the_printed_losses():
    same = programs.same_losses
    assert same({"losses": [7.1, 6.5]}, {"losses": [7.1, 6.5]}) is True
    assert same({"losses": [7.1, 6.5]}, {"losses": [7.1, 6.4]}) is False
    assert same({"losses": [7.1]}, {"losses": [7.1, 6.5]}) is False
    assert same({"losses": []}, {"losses": [7.1]}) is None


def test_a_checkout_without_the_program_is_refused_in_one_line(tmp_path):
    script = BENCHMARKS / "graphcore_programs.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--examples", str(tmp_path), "--programs", "vit"],
        capture_output=True,
        text=True,
        timeout=within(120),
    )
    assert proc.returncode == 2
    assert "no vision/vit/pytorch/pretrain.py; give a graphcore/examples checkout" in proc.stderr


def test_the_results_file_names_no_path_of_the_machine_that_ran_it():
    """The committed file showed ``--examples /work/...`` and ``--python /work/venv/...``."""
    argv = ["benchmarks/graphcore_programs.py", "--examples", "/work/gc", "--modes", "offline"]
    argv += ["--python=/work/venv/bin/python"]
    assert programs.portable_command(argv) == [
        "benchmarks/graphcore_programs.py", "--examples", "PATH/TO/graphcore/examples",
        "--modes", "offline", "--python=VENV/bin/python",
    ]  # fmt: skip


def test_a_run_of_some_modes_keeps_the_other_modes_rows(tmp_path, monkeypatch):
    """A run of one mode replaced every row of its program: the basics tutorial's offline
    and scaling rows were lost to a functional rerun."""
    monkeypatch.setenv("BENCHMARK_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["graphcore_programs.py"])
    first = [{"program": "basics", "mode": m, "result": m} for m in ("functional", "offline")]
    programs._write(first)
    programs._write([{"program": "basics", "mode": "functional", "result": "again"}])
    rows = json.loads((tmp_path / "graphcore_programs.json").read_text())["figures"]
    assert sorted((r["mode"], r["result"]) for r in rows) == [
        ("functional", "again"),
        ("offline", "offline"),
    ]


def test_an_offline_run_of_a_published_row_asks_for_the_probes_of_the_fitted_terms(tmp_path):
    from contract import ENV_SCALING_REQUEST, read_request

    env, read = programs._probing("offline", "C8", tmp_path)
    points, _ = read_request(env[ENV_SCALING_REQUEST])
    # The row's layout (ViT-B/16 on a Bow-POD64: 16 replicas of 4 IPUs on 8 instances), once
    # per probe: the shipped parameters, then each term moved.
    assert {(p.replicas, p.ipus_per_replica, p.instances, p.system) for p in points} == {
        (16, 4, 8, "bow-pod64")
    }
    assert len({p.parameters for p in points}) == len(points) == 9
    assert read() == {}  # no answer: the program ended before simulating
    assert programs._probing("functional", "C8", tmp_path)[0] == {}
    assert programs._probing("offline", None, tmp_path)[0] == {}


def test_the_file_holds_each_program_s_rows_together_in_the_programs_order(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHMARK_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["graphcore_programs.py"])
    programs._write([{"program": "bert", "mode": "offline"}, {"program": "vit", "mode": "offline"}])
    programs._write([{"program": "vit", "mode": "functional", "instances": n} for n in (1, 2)])
    rows = json.loads((tmp_path / "graphcore_programs.json").read_text())["figures"]
    assert [(r["program"], r["mode"], r.get("instances")) for r in rows] == [
        ("vit", "functional", 1),
        ("vit", "functional", 2),
        ("vit", "offline", None),
        ("bert", "offline", None),
    ]


def test_a_refused_configuration_shows_what_does_not_fit():
    """A configuration the model refuses prints no step; the row shows the refusal's first
    line, however the error was raised, and a run that printed its step shows that."""
    errors = [
        "Traceback (most recent call last):",
        "popdist_emu.sim.OutOfMemory: Out of memory: IPU 1 (stage 1: 0) of M fits in total "
        "(8 of 9 bytes) but its fullest tile needs 7 bytes of 6.",
        "  always-live 5 bytes: weights 1, optimizer_state 1",
        "poprun-emu: instance 0 exited with code 1",
    ]
    shown = programs.shown_result([], errors, "offline")
    assert shown.startswith("Out of memory: IPU 1 (stage 1: 0)") and shown.endswith("of 6.")
    step = "step 1.00 ms for 8 samples -> 8,000 samples/s; host IO exposed 0.00 ms"
    assert programs.shown_result([step, "host: 0.1 ms a step; ok"], [], "offline") == (
        f"{step}; host: 0.1 ms a step"
    )
