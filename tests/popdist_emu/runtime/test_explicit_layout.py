"""Options with an explicit layout describe the whole job: nothing reads PopDist's environment.

Outside the launcher, ``Options(layout=hardware.ReplicaLayout(...), instance_index=...)`` is
the job: a pipelined run takes the replica's IPUs from it, a checkpointed run decides which
instance writes from it, an offline run is offline because it says so. Every test runs twice,
with no ``POPDIST_*`` variable at all and with variables describing another job (other
replica and instance counts, one IPU per replica, another instance, offline mode), and
checks through a recording ``os.environ`` that no ``POPDIST_*`` variable was read.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from deadlines import within
from two_dense_blocks import two_dense_blocks

import hardware
import popdist_emu
from contract import layout_environment

WIDTH = 5
# Another job: 16 replicas over 4 instances on one IPU each, this process its instance 3,
# offline, with a system and a report directory of its own.
ANOTHER_JOB = layout_environment(hardware.ReplicaLayout(num_replicas=16, num_instances=4), 3) | {
    "POPDIST_EMU_OFFLINE": "1",
    "POPDIST_EMU_SYSTEM": "bow-pod256",
    "POPDIST_EMU_REPORT_DIR": "/nonexistent/reports",
}


class RecordingEnviron(dict):
    """``os.environ`` that notes every ``POPDIST*`` variable somebody looks up."""

    def __init__(self, base):
        super().__init__(base)
        self.reads = []

    def _note(self, key):
        if isinstance(key, str) and key.startswith("POPDIST"):
            self.reads.append(key)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)


@pytest.fixture(params=["no POPDIST variables", "POPDIST variables of another job"])
def environ(request, monkeypatch):
    for name in [n for n in os.environ if n.startswith("POPDIST")]:
        monkeypatch.delenv(name)
    if request.param != "no POPDIST variables":
        for name, value in ANOTHER_JOB.items():
            monkeypatch.setenv(name, value)
    recording = RecordingEnviron(os.environ)
    monkeypatch.setattr(os, "environ", recording)
    return recording


def mlp_loss(params, batch):
    x, y = batch
    return jnp.mean((jnp.tanh(x @ params["w"] + params["b"]).sum(-1) - y) ** 2)


def mlp_params():
    rng = np.random.default_rng(0)
    return {
        "w": (rng.standard_normal((WIDTH, 3)) * 0.5).astype(np.float32),
        "b": np.zeros(3, np.float32),
    }


def call_batch(options, micro=3, seed=0, width=WIDTH):
    rng = np.random.default_rng(seed)
    lead = (options.device_iterations, options.gradient_accumulation, options.replication_factor)
    x = rng.standard_normal((*lead, micro, width)).astype(np.float32)
    return x, rng.standard_normal((*lead, micro)).astype(np.float32)


def test_pipelined_run_takes_its_ipus_from_the_layout(environ):
    layout = hardware.ReplicaLayout(num_replicas=2, ipus_per_replica=2)
    stages = popdist_emu.PipelinedExecution(popdist_emu.Stage("B0"), popdist_emu.Stage("B1"))
    options = popdist_emu.Options(
        layout=layout, instance_index=0, gradient_accumulation=4, execution_strategy=stages
    )
    assert options.replication_factor == 2
    rng = np.random.default_rng(1)
    params = {
        f"w{i}": (rng.standard_normal((WIDTH, WIDTH)) * 0.4).astype(np.float32) for i in (0, 1)
    }
    model = two_dense_blocks()
    # Two stages over the layout's 2 IPUs per replica (the environment says 1, or nothing).
    trainer = popdist_emu.Trainer(model, optax.sgd(0.1), params, options, timeout=within(60))
    assert trainer.pipeline is not None and trainer.pipeline.num_stages == 2
    assert not trainer.offline
    batch = call_batch(options)
    losses = [trainer.step(batch) for _ in range(2)]
    assert np.all(np.isfinite(losses)) and losses[1] < losses[0]
    # The same model without a strategy (one program per replica) trains to the same numbers.
    plain = popdist_emu.Trainer(
        model,
        optax.sgd(0.1),
        params,
        popdist_emu.Options(layout=layout, gradient_accumulation=4),
        timeout=within(60),
    )
    plain_losses = [plain.step(batch) for _ in range(2)]
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-5)
    simulation = popdist_emu.simulate(trainer, batch, system="pod16")
    assert simulation.layout == layout and len(simulation.pipeline.schedule.stages) == 2
    assert environ.reads == []


@pytest.mark.parametrize("levers", [{}, {"replicated_tensor_sharding": True}], ids=["plain", "rts"])
def test_checkpointed_run_saves_from_instance_zero_of_the_layout(environ, tmp_path, levers):
    layout = hardware.ReplicaLayout(num_replicas=2)
    options = popdist_emu.Options(layout=layout, instance_index=0, **levers)
    optimiser = optax.adamw(0.05)
    trainer = popdist_emu.Trainer(mlp_loss, optimiser, mlp_params(), options, timeout=within(60))
    for seed in range(2):
        trainer.step(call_batch(options, seed=seed))
    path = popdist_emu.save_checkpoint(tmp_path, trainer, {"seed": 7})
    assert path is not None and os.path.isfile(path)
    resumed = popdist_emu.Trainer(mlp_loss, optimiser, mlp_params(), options, timeout=within(60))
    meta = popdist_emu.restore_checkpoint(tmp_path, resumed)
    assert (meta["step"], meta["seed"], resumed.steps_done) == (2, 7, 2)
    for t in (trainer, resumed):
        t.step(call_batch(options, seed=2))
    for a, b in zip(jax.tree.leaves(trainer.params), jax.tree.leaves(resumed.params), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert environ.reads == []


def test_offline_run_is_offline_because_the_options_say_so(environ, tmp_path):
    layout = hardware.ReplicaLayout(num_replicas=8, num_instances=2)
    options = popdist_emu.Options(
        layout=layout, instance_index=0, offline=True, replicated_tensor_sharding=True
    )
    assert (options.replication_factor, options.replica_offset) == (4, 0)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), mlp_params())
    trainer = popdist_emu.Trainer(mlp_loss, optax.adam(0.01), shapes, options)
    assert trainer.offline and trainer.state is None
    batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), call_batch(options))
    compiled = trainer.compile(batch)
    assert compiled.collectives[0].kind == "reduce_scatter"
    # RTS over the layout's instances: each instance's 4 local replicas are one domain.
    assert trainer.sharding_domain == 4 == trainer.lever_info.sharding_domain_size
    simulation = popdist_emu.simulate(trainer, batch, system="pod16")
    assert simulation.layout == layout and simulation.profile.sharding_domain == 4
    written = popdist_emu.report_simulation(simulation, options, report_dir=str(tmp_path))
    assert written == str(tmp_path) and (tmp_path / "summary.json").is_file()
    assert environ.reads == []


def test_a_simulated_run_reports_as_the_instance_its_options_name(environ, tmp_path, capsys):
    """Instance 1 of an explicit layout, outside the launcher: its simulation is the job's
    and it reports as instance 1 (nothing printed, nothing written), whatever the
    environment says; instance 0 of the same job prints and writes the reports."""
    layout = hardware.ReplicaLayout(num_replicas=4, num_instances=2)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), mlp_params())
    reports = {}
    for instance in (1, 0):
        options = popdist_emu.Options(
            layout=layout,
            instance_index=instance,
            offline=True,
            system="pod16",
            report_dir=str(tmp_path / f"from-{instance}"),
        )
        trainer = popdist_emu.Trainer(mlp_loss, optax.adam(0.01), shapes, options)
        batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), call_batch(options))
        simulation = popdist_emu.simulate(trainer, batch)
        assert (simulation.layout, simulation.system.name) == (layout, "pod16")
        reports[instance] = popdist_emu.report_simulation(simulation, options)
        printed = capsys.readouterr().out
        assert ("[popdist-emu] simulated pod16" in printed) == (instance == 0)
    assert reports == {1: None, 0: str(tmp_path / "from-0")}
    assert not (tmp_path / "from-1").exists() and (tmp_path / "from-0" / "summary.json").is_file()
    assert environ.reads == []


@pytest.mark.parametrize("levers", [{}, {"replicated_tensor_sharding": True}], ids=["plain", "rts"])
def test_layout_collectives_are_those_of_a_trainer_of_that_layout(environ, levers):
    here = hardware.ReplicaLayout(num_replicas=4, num_instances=2)
    there = hardware.ReplicaLayout(num_replicas=16, num_instances=4)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), mlp_params())

    def trainer(layout):
        options = popdist_emu.Options(layout=layout, offline=True, **levers)
        batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), call_batch(options))
        return popdist_emu.Trainer(mlp_loss, optax.adam(0.01), shapes, options), batch

    near, near_batch = trainer(here)
    far, far_batch = trainer(there)
    moved = near.layout_collectives(near_batch, there)
    assert moved.collectives == far.collectives(far_batch)
    assert moved.sharding_domain == far.sharding_domain
    assert near.step_shapes(near_batch).micro_batch_size == 3
    assert environ.reads == []
