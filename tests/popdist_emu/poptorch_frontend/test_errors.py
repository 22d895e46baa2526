"""A PopTorch program's errors and notes in PopTorch's words, its option values checked when
set, and ``python program.py`` on as many IPUs as its blocks need (issue 37, items 5 and 6).

In-process, outside ``poprun-emu`` (one instance); the launcher's side is one short run.
"""

from __future__ import annotations

import math
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from deadlines import within
from poprun_beside import poprun_emu

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed")

import popdist_emu.poptorch as poptorch  # noqa: E402
from popdist_emu.popdist import _poptorch_groups  # noqa: E402
from popdist_emu.popdist._poptorch_options import PopDistOptions  # noqa: E402
from popdist_emu.poptorch import _data, _identity, optim  # noqa: E402
from popdist_emu.poptorch._buffers import describe_buffers  # noqa: E402


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("call", "value", "error"),
    [
        ("deviceIterations", 2.5, TypeError),
        ("deviceIterations", "4", TypeError),
        ("deviceIterations", math.nan, TypeError),
        ("deviceIterations", True, TypeError),
        ("deviceIterations", 0, ValueError),
        ("replicationFactor", -2, ValueError),
        ("replicationFactor", 2.0, TypeError),
        ("Training.gradientAccumulation", 0, ValueError),
        ("Training.gradientAccumulation", "8", TypeError),
        ("randomSeed", -1, ValueError),
    ],
)
def test_a_bad_option_value_is_refused_at_its_setter(call: str, value: object, error: type) -> None:
    """PopTorch's options take ints (bool is not one here): refused when set, naming the
    call and the value, before any model exists."""
    opts = poptorch.Options()
    owner = opts.Training if call.startswith("Training.") else opts
    with pytest.raises(error) as info:
        getattr(owner, call.rsplit(".", 1)[-1])(value)
    assert f"poptorch.Options.{call}({value!r}): PopTorch takes an int" in _one_line(info)


def test_a_good_option_value_is_kept_as_an_int() -> None:
    opts = poptorch.Options().deviceIterations(np.int64(3)).randomSeed(0)
    opts.Training.gradientAccumulation(2)
    fields = opts.to_options()
    assert (fields.device_iterations, fields.gradient_accumulation) == (3, 2)
    assert type(fields.device_iterations) is int and opts.random_seed == 0
    with pytest.raises(ValueError, match=r"setAvailableMemoryProportion: '0.5' is not a number"):
        opts.setAvailableMemoryProportion("0.5")  # type: ignore[arg-type]


def test_a_misspelt_option_names_the_programs_class_and_a_close_match() -> None:
    with pytest.raises(AttributeError) as info:
        poptorch.Options().deviceIteration(2)
    assert _one_line(info).startswith(
        "poptorch.Options has no 'deviceIteration' (did you mean deviceIterations?)"
    )
    with pytest.raises(AttributeError) as info:
        PopDistOptions().Training.gradientAcumulation(2)
    assert _one_line(info).startswith(
        "popdist.poptorch.Options.Training has no 'gradientAcumulation' (did you mean "
        "gradientAccumulation?)"
    )
    with pytest.raises(AttributeError, match=r"no 'frobnicate': it is not") as info:
        poptorch.Options().frobnicate()  # nothing close: no suggestion
    assert "did you mean" not in str(info.value)


class _Net(torch.nn.Module):
    """Four linear layers; with ``ipus``, layer k begins block ``Bk`` on IPU ``ipus[k]``."""

    def __init__(self, ipus: tuple[int, ...] = ()) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(4))
        for k, ipu in enumerate(ipus):
            poptorch.BeginBlock(self.layers[k], f"B{k}", ipu_id=ipu)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for layer in self.layers:
            x = layer(x)
        return x, torch.nn.functional.mse_loss(x, y)


def _call(model: torch.nn.Module, opts: poptorch.Options, samples: int) -> poptorch.PoplarExecutor:
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    generator = torch.Generator().manual_seed(1)
    training(
        torch.randn(samples, 4, generator=generator), torch.randn(samples, 4, generator=generator)
    )
    return training


def test_outside_the_launcher_a_replica_has_the_ipus_its_blocks_need() -> None:
    """``python program.py`` with blocks on IPUs 0..3: one replica of four IPUs, as PopTorch
    on one host attaches them, trained and simulated on four."""
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(7)
    training = _call(_Net((0, 1, 2, 3)), opts, 7)
    assert training._mode_fields.layout.ipus_per_replica == 4
    assert training._trainer.options.layout.ipus_per_replica == 4
    assert len(training._trainer.options.execution_strategy.stages) == 4


@pytest.mark.parametrize(
    ("ipus", "match"),
    [
        ((0, 3), r"blocks are placed on IPUs \[0, 3\], leaving IPU 1 without a block; .*0\.\.1"),
        ((0, 1, 2), r"placed on 3 IPUs \(ipu_id 0\.\.2\); .*place blocks on 4 IPUs"),
    ],
)
def test_a_placement_popdist_emu_cannot_run_is_refused_in_one_line(
    ipus: tuple[int, ...], match: str
) -> None:
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(8)
    with pytest.raises(ValueError, match=match) as info:
        _call(_Net(ipus), opts, 8)
    _one_line(info)


def test_too_little_accumulation_for_a_pipeline_names_poptorchs_call() -> None:
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    with pytest.raises(ValueError) as info:
        _call(_Net((0, 1)), opts, 2)
    message = _one_line(info)
    assert "call opts.Training.gradientAccumulation(3) or more" in message
    assert "--gradient-accumulation" not in message and "gradient_accumulation=" not in message


def test_a_dataset_smaller_than_one_combined_batch_says_so_with_both_numbers() -> None:
    opts = poptorch.Options().deviceIterations(4)
    data = torch.utils.data.TensorDataset(torch.zeros(800, 2), torch.zeros(800))
    with pytest.raises(ValueError) as info:
        poptorch.DataLoader(opts, data, batch_size=400, drop_last=True)
    message = _one_line(info)
    assert "the dataset holds 800 samples, fewer than one global combined batch of 1600" in message
    assert "drop_last" not in message
    with pytest.raises(ValueError, match=r"drop_last=False\): the dataset's 800 samples leave 32"):
        poptorch.DataLoader(opts, data, batch_size=48, drop_last=False)


def test_many_buffers_are_counted_per_module_not_listed() -> None:
    names = [f"layers.{k}.{b}" for k in range(15) for b in ("running_mean", "running_var", "n")]
    text = describe_buffers(names)
    assert text == (
        "45 buffers of 15 modules: 3 each (running_mean, running_var, n) in layers.0, "
        "layers.1 and 13 more"
    )
    assert describe_buffers(["bn.running_mean", "bn.running_var"]) == (
        "bn.running_mean, bn.running_var"
    )


class _Counting(torch.nn.Module):
    """A linear layer that counts its calls in three buffers, changed on every replica (not
    BatchNorm's running statistics, which PopTorch lets change per replica)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        for name in ("calls", "rows", "total"):
            self.register_buffer(name, torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.rows += x.shape[0]
        self.total += x.sum()
        return self.linear(x)


def test_a_buffers_refusal_stays_short() -> None:
    """Fifteen modules whose buffers change on two replicas: PopTorch's refusal, the buffers
    counted per module instead of listed."""

    class Counters(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.Sequential(*[_Counting() for _ in range(15)])

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.layers(x)
            return out, torch.nn.functional.mse_loss(out, y)

    with pytest.raises(ValueError, match=r"45 buffers of 15 modules: 3 each") as info:
        _call(Counters(), poptorch.Options().replicationFactor(2), 4)
    assert len(_one_line(info)) < 400


def test_identity_calls_return_their_tensor_with_one_note_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_identity, "_NOTED", set())
    x = torch.arange(3.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert poptorch.ipu_print_tensor(x, "activations") is x
            assert poptorch.nop(x) is x
    notes = [str(w.message) for w in caught]
    assert len(notes) == 2, notes
    assert notes[0].startswith("poptorch.ipu_print_tensor('activations'): the IPU would print")
    assert notes[1].startswith("poptorch.nop: the identity")
    with pytest.warns(UserWarning, match="connectionType: accepted, no effect"):
        poptorch.Options().connectionType(poptorch.ConnectionType.OnDemand)
    assert poptorch.enums.ConnectionType is poptorch.ConnectionType


def test_loss_scaling_warns_once_and_partials_say_what_they_feed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(optim, "_WARNED", set())
    monkeypatch.setattr(_poptorch_groups, "_NOTED", set())
    params = list(torch.nn.Linear(2, 2).parameters())
    with pytest.warns(UserWarning, match=r"SGD\(loss_scaling=128\): no effect in popdist-emu"):
        optim.SGD(params, lr=0.1, loss_scaling=128)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default of 1 and a second scaling say nothing
        optim.SGD(params, lr=0.1, loss_scaling=1.0)
        optim.Adam(params, loss_scaling=64)
    with pytest.warns(UserWarning, match=r"setPartialsType\(torch.float16\): the simulated IPU"):
        opts = poptorch.Options()
        opts.Precision.setPartialsType(torch.half)
    assert opts.to_options().partials_type == "half"


def test_loader_workers_fork_without_jaxs_deadlock_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX runs threads here (it computed), so its at-fork hook warns at every fork; the
    loader's workers start with one note instead."""
    import jax.numpy as jnp

    jnp.ones(2).block_until_ready()
    monkeypatch.setattr(_data, "_NOTED", [])
    data = torch.utils.data.TensorDataset(torch.zeros(8, 2), torch.zeros(8))
    loader = poptorch.DataLoader(poptorch.Options(), data, batch_size=2, num_workers=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(list(loader)) == 4
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "os.fork() was called" in m], messages
    assert [m for m in messages if m.startswith("poptorch.DataLoader: its 1 worker")], messages


FAILING = """
import torch, poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = poptorch.BeginBlock(torch.nn.Linear(4, 4), "A", ipu_id=0)
        self.b = poptorch.BeginBlock(torch.nn.Linear(4, 4), "B", ipu_id=3)

    def forward(self, x):
        return self.b(self.a(x)).sum()

model = Net()
poptorch.trainingModel(model, poptorch.Options())(torch.ones(1, 4))
"""


def test_under_the_launcher_its_flag_rules_and_the_traceback_comes_once(tmp_path: Path) -> None:
    """Under poprun-emu, --ipus-per-replica 1 rules over the blocks' IPUs (refused naming
    the flag); the one instance's traceback is printed once, with no recap of it and no
    "other instances" that never were."""
    program = tmp_path / "failing.py"
    program.write_text(FAILING)
    launcher, env = poprun_emu()
    out = subprocess.run(
        [launcher, "--num-replicas", "1", str(program)],
        capture_output=True,
        text=True,
        env=env,
        timeout=within(300),
    )
    assert out.returncode == 1, out.stderr[-3000:]
    assert out.stderr.count("Traceback (most recent call last)") == 1, out.stderr[-3000:]
    assert "run poprun-emu with --ipus-per-replica 4" in out.stderr
    assert "last lines of instance" not in out.stderr
    assert "other instances" not in out.stderr


def test_under_poprun_a_replication_factor_it_did_not_give_is_refused_when_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PopRun's environment of 2 replicas over 2 instances (1 local): ``replicationFactor(2)``
    names PopDist's call and the launcher's flag that would give it, when a model is made
    with it; options set so and never used are no error (PopTorch checks at attach time)."""
    monkeypatch.setenv("POPDIST_NUM_TOTAL_REPLICAS", "2")
    monkeypatch.setenv("POPDIST_NUM_LOCAL_REPLICAS", "1")
    opts = poptorch.Options()
    assert opts.replicationFactor(1).to_options().replication_factor == 1
    unused = poptorch.Options().deviceIterations(20).replicationFactor(2)  # the walkthrough's
    with pytest.raises(ValueError) as info:
        poptorch.trainingModel(torch.nn.Linear(2, 1), unused)
    assert _one_line(info) == (
        "poptorch.Options.replicationFactor(2): poprun-emu gave this instance 1 local "
        "replica(s) (--num-replicas 2 over 2 instance(s)); call replicationFactor(1) "
        "(popdist.getNumLocalReplicas()), or run poprun-emu with --num-replicas 4."
    )
