"""The examples refuse bad flags in one line before any JAX work; --save writes exactly PATH."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from deadlines import within

import hardware
import popdist_emu

EXAMPLES = Path(__file__).parents[2] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def train():
    return _load("train")


@pytest.fixture(scope="module")
def resnet50():
    return _load("resnet50")


BAD = [
    (["--micro-batch-size", "0"], "--micro-batch-size: 0 is below 1"),
    (["--micro-batch-size", "-1"], "--micro-batch-size: -1 is below 1"),
    (["--device-iterations", "0"], "--device-iterations: 0 is below 1"),
    (["--gradient-accumulation", "0"], "--gradient-accumulation: 0 is below 1"),
    (["--steps", "0"], "--steps: 0 is below 1"),
    (["--seed", str(2**70)], "outside [0, 2**63)"),
    (["--seed", "-1"], "outside [0, 2**63)"),
    (["--prefetch-depth", "0"], "--prefetch-depth: 0 is below 1"),
    (["--learning-rate", "-1"], "not a finite number > 0"),
    (["--learning-rate", "inf"], "not a finite number > 0"),
    (["--micro-batch-size", "eight"], "'eight' is not a whole number"),
    (["--save", "nodir/p.npz"], "does not exist: create it first"),
    (["--available-memory-proportion", "0"], "0 is outside (0, 1]"),
    (["--available-memory-proportion", "0.6", "1.5"], "1.5 is outside (0, 1]"),
]


@pytest.mark.parametrize(("argv", "message"), BAD)
def test_train_refuses_bad_values_in_one_line(train, capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:
        train.parse_args(argv)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err


def test_save_must_not_be_a_directory(train, capsys, tmp_path):
    with pytest.raises(SystemExit):
        train.parse_args(["--save", str(tmp_path)])
    assert "is a directory: give a file path" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--micro-batch-size", "0"], "0 is below 1"),
        # The step is profiled from shapes, never trained: no parameters are drawn, no steps
        # run and nothing is saved, so these flags are not offered.
        (["--seed", "1"], "--seed"),
        (["--save", "p.npz"], "--save"),
        (["--steps", "2"], "--steps"),
    ],
)
def test_resnet50_refuses_bad_values_in_one_line(
    resnet50, capsys, tmp_path, monkeypatch, argv, message
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:
        resnet50._parse(argv)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err


def test_good_values_pass(train):
    args = train.parse_args(["--seed", str(2**63 - 1), "--learning-rate", "1e-3"])
    assert args.seed == 2**63 - 1 and args.learning_rate == 1e-3


def test_save_writes_exactly_the_path_given(train, tmp_path):
    path = tmp_path / "params"  # no .npz: np.savez would have written params.npz
    train.save_params(str(path), {"w": np.arange(3.0)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params"]
    with np.load(path) as saved:
        np.testing.assert_array_equal(saved["w"], np.arange(3.0))


def test_per_ipu_proportions_one_for_all_or_one_per_ipu():
    from popdist_emu.arguments import per_ipu_proportions

    assert per_ipu_proportions([0.3], 4) == 0.3
    assert per_ipu_proportions([0.15, 0.18, 0.2, 0.25], 4) == {
        "IPU0": 0.15, "IPU1": 0.18, "IPU2": 0.2, "IPU3": 0.25,
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"0.1 0.2 0.3: give one value for every IPU, or one "):
        per_ipu_proportions([0.1, 0.2, 0.3], 2)


@pytest.fixture(scope="module")
def bert():
    return _load("bert")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--micro-batch-size", "0"], "--micro-batch-size: 0 is below 1"),
        (["--sequence-length", "1"], "--sequence-length: 1 is below 2"),
        (["--learning-rate", "-1"], "not a finite number > 0"),
        (["--available-memory-proportion", "2"], "2 is outside (0, 1]"),
        (["--steps", "3", "--device-iterations", "2"], "must be a multiple of"),
    ],
)
def test_bert_refuses_bad_values_in_one_line(bert, capsys, argv, message):
    with pytest.raises(SystemExit) as refused:
        bert.parse_args(argv)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("text", ["1_6", "\uff11\uff16", "\u0661\u0666"])
def test_integers_are_read_in_ascii_digits_only(train, capsys, text):
    with pytest.raises(SystemExit) as refused:
        train.parse_args(["--micro-batch-size", text])
    assert refused.value.code == 2
    assert "not a whole number in ASCII digits" in capsys.readouterr().err


def _refused_before_compile(*argv):
    """The example's one-line refusal (exit 2), from a process of its own."""
    result = subprocess.run(
        [sys.executable, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=within(120),
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_train_refuses_an_accumulation_whose_batch_the_host_cannot_hold():
    line = _refused_before_compile(EXAMPLES / "train.py", "--gradient-accumulation", 10**9)
    assert line.startswith("train.py: error: --gradient-accumulation 1000000000")
    assert "memory this host has available: lower --gradient-accumulation" in line


def test_bert_refuses_a_sequence_whose_attention_no_ipu_can_hold():
    line = _refused_before_compile(EXAMPLES / "bert.py", "--sequence-length", 10**9)
    assert line.startswith("bert.py: error: --sequence-length 1000000000")
    assert "In-Processor Memory" in line and "lower --sequence-length" in line


def test_bert_checks_pass_the_mlperf_configuration(monkeypatch):
    bert = _load("bert")
    args = bert.parse_args(["--model", "large", "--sequence-length", "512"])

    options = popdist_emu.Options(layout=hardware.ReplicaLayout(4, ipus_per_replica=4))
    bert.check_sizes(args, options, 4, offline=True)  # returns: nothing refused


def test_train_resume_refuses_damage_and_another_learning_rate_before_compile(tmp_path):
    ckpt = tmp_path / "ck"
    train = EXAMPLES / "train.py"
    done = subprocess.run(
        [sys.executable, str(train), "--steps", "2", "--checkpoint-dir", str(ckpt)],
        capture_output=True,
        text=True,
        timeout=within(300),
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stderr
    resume = (train, "--steps", "4", "--checkpoint-dir", ckpt, "--resume")
    line = _refused_before_compile(*resume, "--learning-rate", "0.5")
    assert "written with --learning-rate" in line and "not 0.5" in line
    path = ckpt / "checkpoint.npz"
    path.write_bytes(path.read_bytes()[:-100])
    line = _refused_before_compile(*resume)
    assert "checkpoint.npz is damaged" in line


def test_train_resume_speaks_refuses_another_data_stream_and_ends_when_done(tmp_path):
    """Checkpoints and resumes are announced in one line each; a resume that would read
    other samples (another replica count, micro-batch, ...) is refused unless
    --allow-new-data-order; a resume with nothing left says so and runs nothing."""
    ckpt = tmp_path / "ck"
    train = EXAMPLES / "train.py"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}

    def run(*argv, replicas=1):
        layout = {
            "POPDIST_NUM_TOTAL_REPLICAS": str(replicas),
            "POPDIST_NUM_LOCAL_REPLICAS": str(replicas),
        }
        return subprocess.run(
            [sys.executable, str(train), "--checkpoint-dir", str(ckpt), *argv],
            capture_output=True,
            text=True,
            timeout=within(300),
            env={**env, **layout},
        )

    first = run("--steps", "2")
    assert first.returncode == 0, first.stderr
    written = [line for line in first.stderr.splitlines() if "checkpoint of step" in line]
    assert written == [f"[popdist-emu] checkpoint of step 2 written to {ckpt}/checkpoint.npz"]
    other = _refused_before_compile(
        train, "--steps", "4", "--checkpoint-dir", ckpt, "--resume", "--micro-batch-size", "4"
    )
    assert "written with --micro-batch-size 8, not 4" in other
    assert "--allow-new-data-order" in other
    wider = run("--steps", "4", "--resume", replicas=2)
    assert (
        wider.returncode == 2
        and "written with --num-replicas (poprun-emu) 1, not 2" in wider.stderr
    )
    allowed = run("--steps", "4", "--resume", "--allow-new-data-order", replicas=2)
    assert allowed.returncode == 0, allowed.stderr
    assert f"[popdist-emu] resumed from {ckpt}/checkpoint.npz at step 2" in allowed.stderr
    assert json.loads(allowed.stdout.strip().splitlines()[-1])["final_loss"] is not None
    done = run("--steps", "4", "--resume", "--allow-new-data-order", replicas=2)
    assert done.returncode == 0
    assert done.stderr.strip().splitlines() == [
        f"train.py: --resume: the checkpoint in {ckpt} is already at step 4 of --steps 4: "
        "nothing to run (give a larger --steps to train on)."
    ]
    assert done.stdout == ""  # no null losses, no JSON line


@pytest.mark.timeout(300)
def test_train_refuses_a_checkpoint_directory_another_job_holds(tmp_path):
    ckpt = tmp_path / "ck"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from popdist_emu.runtime._checkpoint_owner import claim_directory\n"
            "claim_directory(sys.argv[1]); print('claimed', flush=True); time.sleep(120)\n",
            str(ckpt),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "POPDIST_EMU_JOB_DIR"},
    )
    try:
        assert holder.stdout.readline() == "claimed\n"
        train = EXAMPLES / "train.py"
        line = _refused_before_compile(train, "--steps", "2", "--checkpoint-dir", ckpt)
        assert "is in use by another job" in line and f"pid {holder.pid}" in line
        assert not (ckpt / "checkpoint.npz").exists()
    finally:
        holder.kill()
        holder.wait(timeout=within(30))
