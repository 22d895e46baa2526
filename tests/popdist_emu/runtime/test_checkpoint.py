"""Checkpoint and resume: N steps, a checkpoint, then M more steps from it give the bits of
N+M uninterrupted steps, whatever holds the optimiser state (plain, offloaded, RTS shards of
any domain) on either side of the checkpoint."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from popdist_emu import Options, ReplicaLoader, Trainer
from popdist_emu.runtime._checkpoint import (
    CHECKPOINT_FILE,
    _checksum,
    full_opt_state,
    load_checkpoint,
    read_meta,
    restore_checkpoint,
    save_checkpoint,
)
from popdist_emu.runtime._checkpoint import (
    check_fits as check_checkpoint,
)
from popdist_emu.runtime._checkpoint_owner import OWNER_FILE, CheckpointError, claim_directory

IN, OUT, REPLICAS = 6, 4, 4
ADAMW = optax.adamw(0.05)  # shared, so the trainers share compiled code


def within(seconds: float) -> float:
    """``deadlines.within``, imported when a test runs: instances' scripts import this module
    with only its own folder on the path."""
    from deadlines import within as scaled

    return scaled(seconds)


def init_params():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {"w": jax.random.normal(k1, (IN, OUT)), "b": jax.random.normal(k2, (OUT,))}


def loss_fn(params, batch):
    x, y = batch
    return jnp.mean((jnp.tanh(x @ params["w"] + params["b"]) - y) ** 2)


def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(64, IN)).astype(np.float32), rng.normal(size=(64, OUT)).astype(
        np.float32
    )


# How the optimiser state is held: the "layouts" of one instance's four replicas.
HOLDERS = {
    "plain": {},
    "offloaded": {"offload_optimiser": True},
    "rts-domain-2": {"replicated_tensor_sharding": True, "sharding_domain": 2},
    "rts-domain-4": {"replicated_tensor_sharding": True, "sharding_domain": 4},
}


def trainer_for(holder):
    options = Options(replication_factor=REPLICAS, **HOLDERS[holder])
    return Trainer(loss_fn, ADAMW, init_params(), options), options


def run(trainer, options, first, last):
    loader = ReplicaLoader(data(), 2, options, seed=3)
    for call in range(first, last):
        trainer.step(loader.batch(call))


def leaves(trainer):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(trainer.params)]


@settings(max_examples=6)
@given(
    n=st.integers(1, 3),
    m=st.integers(1, 3),
    before=st.sampled_from(sorted(HOLDERS)),
    after=st.sampled_from(sorted(HOLDERS)),
)
@example(n=2, m=1, before="rts-domain-2", after="offloaded")
@example(n=1, m=2, before="offloaded", after="rts-domain-4")
def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path_factory, n, m, before, after):
    directory = tmp_path_factory.mktemp("ckpt")
    straight, options = trainer_for("plain")
    run(straight, options, 0, n + m)

    first, options = trainer_for(before)
    run(first, options, 0, n)
    save_checkpoint(directory, first, {"seed": 3})
    second, options = trainer_for(after)
    meta = restore_checkpoint(directory, second)
    assert meta == {"step": n, "seed": 3} and second.steps_done == n
    run(second, options, n, n + m)
    for a, b in zip(leaves(straight), leaves(second), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_whole_state_takes_a_weight_too_small_to_shard_once():
    """A weight with fewer elements than the sharding domain is not sharded: every replica
    holds all of its state, and the gathered state takes it once (it summed the copies)."""
    params = {**init_params(), "s": jnp.ones((2,))}

    def scaled(p, batch):
        return loss_fn(p, batch) * jnp.sum(p["s"])

    states = []
    for holder in ("plain", "rts-domain-4"):
        options = Options(replication_factor=REPLICAS, **HOLDERS[holder])
        trainer = Trainer(scaled, ADAMW, params, options)
        run(trainer, options, 0, 2)
        states.append(jax.tree_util.tree_leaves(full_opt_state(trainer)))
    assert trainer.sharding_plan is not None and not all(trainer.sharding_plan.sharded)
    for got, want in zip(states[1], states[0], strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_failed_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch):
    trainer, options = trainer_for("plain")
    run(trainer, options, 0, 1)
    save_checkpoint(tmp_path, trainer)
    before = (tmp_path / CHECKPOINT_FILE).read_bytes()
    run(trainer, options, 1, 2)

    def disk_full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    with pytest.raises(OSError, match="No space"):
        save_checkpoint(tmp_path, trainer)
    assert (tmp_path / CHECKPOINT_FILE).read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == sorted([CHECKPOINT_FILE, OWNER_FILE, ".checkpoint.lock"])
    assert read_meta(tmp_path)["step"] == 1


def test_a_missing_or_foreign_checkpoint_is_refused(tmp_path):
    trainer, _ = trainer_for("plain")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        restore_checkpoint(tmp_path, trainer)
    other = Trainer(loss_fn, optax.sgd(0.1), init_params(), Options(replication_factor=REPLICAS))
    save_checkpoint(tmp_path, other)
    with pytest.raises(CheckpointError, match="opt_state arrays"):
        restore_checkpoint(tmp_path, trainer)


JOB = Path(__file__).with_name("checkpoint_job.py")


def _poprun(instances, *args):
    command = [sys.executable, "-m", "launch", "--num-replicas", "4"]
    command += ["--num-instances", str(instances), str(JOB)]
    proc = subprocess.run([*command, *args], capture_output=True, text=True, timeout=within(600))
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_job_resumes_on_another_instance_layout_bit_identically(tmp_path):
    # RTS shards follow the layout: 2 steps on 2 instances (2 replicas each), then resumed
    # on 4 instances up to step 3, against 3 uninterrupted steps on 1 instance.
    ckpt, straight = tmp_path / "ckpt", tmp_path / "straight"
    _poprun(2, "2", str(ckpt), str(tmp_path / "first.npz"))
    _poprun(4, "3", str(ckpt), str(tmp_path / "resumed.npz"), "--resume")
    _poprun(1, "3", str(straight), str(tmp_path / "straight.npz"))
    with np.load(tmp_path / "straight.npz") as a, np.load(tmp_path / "resumed.npz") as b:
        assert len(a.files) == len(b.files) == 2
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])


def _saved(tmp_path):
    trainer, options = trainer_for("plain")
    run(trainer, options, 0, 1)
    save_checkpoint(tmp_path, trainer, {"seed": 3})
    return tmp_path / CHECKPOINT_FILE


@pytest.mark.parametrize("cut", [0, 1, 100, 0.5, -1])
def test_a_truncated_checkpoint_is_refused_in_one_line(tmp_path, cut):
    path = _saved(tmp_path)
    data = path.read_bytes()
    keep = int(len(data) * cut) if isinstance(cut, float) else cut % len(data)
    path.write_bytes(data[:keep])
    trainer, _ = trainer_for("plain")
    with pytest.raises(CheckpointError, match="is damaged") as refused:
        restore_checkpoint(tmp_path, trainer)
    assert "\n" not in str(refused.value)
    with pytest.raises(CheckpointError, match="is damaged"):
        read_meta(tmp_path)


@settings(max_examples=40, deadline=None)
@given(position=st.floats(0.0, 0.999), flip=st.integers(1, 255))
def test_a_corrupted_byte_is_refused_or_changes_nothing(tmp_path_factory, position, flip):
    """A flipped byte is refused as damage, unless it lies in archive bookkeeping that
    carries no content (a timestamp): then exactly the written content is read."""
    directory = tmp_path_factory.mktemp("ckpt")
    path = _saved(directory)
    intact_meta, intact = load_checkpoint(directory)
    data = bytearray(path.read_bytes())
    data[int(position * len(data))] ^= flip
    path.write_bytes(bytes(data))
    try:
        meta, arrays = load_checkpoint(directory)
    except CheckpointError as error:
        assert "is damaged" in str(error)
        return
    assert meta == intact_meta and arrays.keys() == intact.keys()
    for key, x in arrays.items():
        np.testing.assert_array_equal(x, intact[key])
        assert x.dtype == intact[key].dtype


def test_corruption_of_array_bytes_is_refused(tmp_path):
    path = _saved(tmp_path)
    data = bytearray(path.read_bytes())
    with np.load(path) as saved:
        raw = saved["params/00000"].tobytes()
    at = bytes(data).index(raw)  # npz members are stored uncompressed
    data[at + 3] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="is damaged"):
        read_meta(tmp_path)


def _rewritten(path, change):
    """The checkpoint with ``change(arrays, info)`` applied and its checksum made to match,
    as a writer that diverged or another program would have written it."""
    with np.load(path) as saved:
        arrays = {k: saved[k] for k in saved.files}
    info = json.loads(arrays.pop("__meta__").tobytes().decode())
    change(arrays, info)
    info["checksum"] = _checksum(arrays, info)
    arrays["__meta__"] = np.frombuffer(json.dumps(info).encode(), np.uint8)
    np.savez(path, **arrays)


def test_non_finite_values_are_refused(tmp_path):
    path = _saved(tmp_path)

    def poison(arrays, _info):
        x = arrays["params/00000"].copy()
        x.flat[0] = np.nan
        arrays["params/00000"] = x

    _rewritten(path, poison)
    with pytest.raises(CheckpointError, match="params/00000 holds non-finite values"):
        read_meta(tmp_path)


def test_another_model_is_refused_before_any_compile(tmp_path):
    _saved(tmp_path)
    bigger = {k: np.concatenate([v, v]) for k, v in init_params().items()}
    trainer = Trainer(loss_fn, ADAMW, bigger, Options(replication_factor=REPLICAS))
    with pytest.raises(CheckpointError, match="params differ from the trainer's"):
        check_checkpoint(tmp_path, trainer)
    same, _ = trainer_for("plain")
    assert check_checkpoint(tmp_path, same) == {"step": 1, "seed": 3}


@pytest.mark.parametrize("step", [-20, "20", 20.5, True, None])
def test_a_step_that_is_no_count_of_steps_is_refused_in_one_line(tmp_path, step):
    """A checkpoint edited and its checksum recomputed: ``step`` -20, "20" or 20.5 gave raw
    tracebacks after start-up; ``true`` resumed silently."""
    _rewritten(_saved(tmp_path), lambda _arrays, info: info.update(step=step))
    with pytest.raises(CheckpointError, match="is not a whole number of optimiser steps") as no:
        read_meta(tmp_path)
    assert "\n" not in str(no.value)


@pytest.mark.parametrize("holder", ["plain", "rts-domain-2", "offloaded"])
@pytest.mark.parametrize("step", [0, 15])
def test_a_step_that_disagrees_with_the_optimisers_count_is_refused(tmp_path, holder, step):
    """Step 15 or 0 with the weights of step 1 resumed silently and trained on
    already-trained weights; AdamW's own count says which step the weights are of."""
    _rewritten(_saved(tmp_path), lambda _arrays, info: info.update(step=step))
    trainer, _ = trainer_for(holder)
    words = f"its step {step} disagrees with the optimiser's own count 1"
    with pytest.raises(CheckpointError, match=words):
        check_checkpoint(tmp_path, trainer)
    with pytest.raises(CheckpointError, match=words):
        restore_checkpoint(tmp_path, trainer)


@pytest.mark.parametrize("name", [OWNER_FILE, ".checkpoint.lock"])
def test_an_owner_or_lock_path_that_is_no_file_is_refused_in_one_line(tmp_path, name):
    (tmp_path / name).mkdir()
    with pytest.raises(CheckpointError, match=f"{name} is a directory, where this job records"):
        claim_directory(tmp_path, None)


HOLDER = (
    "import sys, time\n"
    "from popdist_emu.runtime._checkpoint_owner import claim_directory\n"
    "claim_directory(sys.argv[1])\n"
    "print('claimed', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def _holder(directory, seconds):
    env = {k: v for k, v in os.environ.items() if k != "POPDIST_EMU_JOB_DIR"}
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout.readline() == "claimed\n"
    return process


@pytest.mark.timeout(120)
def test_another_running_job_is_refused_and_a_dead_ones_claim_taken_over(tmp_path):
    other = _holder(tmp_path, 60)
    try:
        trainer, options = trainer_for("plain")
        with pytest.raises(CheckpointError, match=f"in use by another job .*pid {other.pid}"):
            claim_directory(tmp_path)
        run(trainer, options, 0, 1)
        with pytest.raises(CheckpointError, match="in use by another job"):
            save_checkpoint(tmp_path, trainer)
        assert not (tmp_path / CHECKPOINT_FILE).exists()
    finally:
        other.kill()  # SIGKILL: its record stays, naming a process that is gone
        other.wait(timeout=within(30))
    save_checkpoint(tmp_path, trainer)
    assert read_meta(tmp_path)["step"] == 1
    assert json.loads((tmp_path / OWNER_FILE).read_text())["pid"] == os.getpid()


@pytest.mark.timeout(120)
def test_an_owner_killed_and_not_yet_reaped_is_gone(tmp_path):
    """A killed owner stays a zombie until its parent reaps it; ``kill(pid, 0)`` reaches a
    zombie, and its claim was kept as a running job's."""
    from zombies import until_zombie  # lazily, as ``within``

    other = _holder(tmp_path, 60)
    other.kill()
    until_zombie(other)
    try:
        claim_directory(tmp_path, None)
        assert json.loads((tmp_path / OWNER_FILE).read_text())["pid"] == os.getpid()
    finally:
        other.wait(timeout=within(30))


@pytest.mark.timeout(120)
def test_a_job_that_ends_leaves_the_directory_free(tmp_path):
    done = _holder(tmp_path, 0)
    assert done.wait(timeout=within(30)) == 0
    assert not (tmp_path / OWNER_FILE).exists()
