"""profile_replica: a plain trainer is one stage, a pipelined one a stage per pipeline stage,
both from one definition of the gradient's bytes, and both through the one checked path
(planner warnings, memory check)."""

import jax
import jax.numpy as jnp
import optax
import pytest
from two_dense_blocks import two_dense_blocks

import hardware
import popdist_emu

WIDTH, MICRO, ACCUMULATION = 256, 8, 4


def _trainer(ipus: int, **options):
    """Two float16 256x256 layers and a float32 loss, offline on one replica of ``ipus``."""
    weights = {f"w{i}": jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float16) for i in range(2)}
    strategy = popdist_emu.PipelinedExecution("B0", "B1") if ipus > 1 else None
    opts = popdist_emu.Options(
        layout=hardware.ReplicaLayout(1, ipus_per_replica=ipus),
        offline=True,
        system="pod16",
        gradient_accumulation=ACCUMULATION,
        execution_strategy=strategy,
        **options,
    )
    trainer = popdist_emu.Trainer(two_dense_blocks(), optax.sgd(0.1), weights, opts)
    lead = (1, ACCUMULATION, 1, MICRO)
    batch = (
        jax.ShapeDtypeStruct((*lead, WIDTH), jnp.float16),
        jax.ShapeDtypeStruct(lead, jnp.float32),
    )
    return trainer, batch


def test_every_path_charges_the_gradient_as_the_ipu_holds_it():
    """A float16 model with a float32 loss: its gradients and accumulators are float16 on
    the IPU (PopART's default: an accumulator in its weight's dtype), for the plain replica
    and for each stage of the pipelined one alike (the plain path once charged them in the
    runtime's float32 accumulator, twice the pipelined path's)."""
    plain = popdist_emu.profile_replica(*_trainer(1))
    piped = popdist_emu.profile_replica(*_trainer(2))
    half = 2 * WIDTH * WIDTH  # one float16 layer's bytes
    assert plain.profile.gradient_bytes == piped.profile.gradient_bytes == 2 * half
    assert [s.gradient_bytes for s in piped.stages] == [half, half]
    assert [s.parameter_bytes for s in piped.stages] == [half, half]
    assert sum(s.gradient_bytes for s in piped.stages) == plain.stages[0].gradient_bytes
    pipelined = popdist_emu.simulate(*_trainer(2))
    one = popdist_emu.simulate(*_trainer(1))
    per_ipu = [m.categories["gradient_accumulators"] for m in pipelined.replica.ipu_memory]
    assert per_ipu == [half, half]
    assert sum(per_ipu) == one.memory.categories["gradient_accumulators"] == 2 * half


def test_a_plain_trainer_is_one_stage_and_a_pipelined_one_a_stage_each():
    plain = popdist_emu.profile_replica(*_trainer(1))
    assert plain.strategy is None and [s.ipu for s in plain.stages] == [0]
    assert plain.stages[0] == hardware.micro_step_stage(plain.profile)
    piped = popdist_emu.profile_replica(*_trainer(2))
    assert piped.strategy == "pipelined" and [s.blocks for s in piped.stages] == [("B0",), ("B1",)]
    assert all(s.backward_reruns_forward for s in piped.stages)
    # The replica's counts are its stages' summed.
    assert piped.profile.grad_flops == sum(s.forward.flops + s.backward.flops for s in piped.stages)
    assert piped.profile.num_ops == sum(s.num_ops for s in piped.stages)


@pytest.mark.parametrize("ipus", [1, 2], ids=["plain", "pipelined"])
def test_planner_warnings_are_printed_for_every_replica(ipus, capsys):
    """PopLibs' phase-two warning, on stderr before the step is checked, plain or pipelined
    (the pipelined path once printed none)."""
    trainer, batch = _trainer(ipus, available_memory_proportion=0.0001)
    simulation = popdist_emu.simulate(trainer, batch)
    err = capsys.readouterr().err
    assert hardware.PLANNER_WARNING in err
    assert any(m.planner is not None and m.planner.warnings for m in simulation.replica.ipu_memory)
