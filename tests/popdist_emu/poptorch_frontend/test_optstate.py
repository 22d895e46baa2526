"""The optimiser's state in ``optimizer.state_dict()`` after training, and resume from it.

PyTorch's layout and values (eager PyTorch with the same optimiser and data, within float
rounding); LAMB against its own formula; a checkpoint loaded in a new Python process goes on
bit for bit; states the emulator cannot take are refused in one line. Needs torch and torchax.
"""

from __future__ import annotations

import copy
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deadlines import within
from poprun_beside import poprun_emu

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")
poptorch = pytest.importorskip("popdist_emu.poptorch")

PROGRAM = Path(__file__).with_name("resume_program.py")


class _Loss(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(2, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.linear(x), y)


X = torch.linspace(-1, 1, 16).reshape(8, 2)
Y = torch.arange(8) % 3


def _trained(make: Any, steps: int = 4, options: Any = None) -> tuple[Any, Any]:
    """The module and optimiser after ``steps`` calls of a training model on (X, Y)."""
    model = _Loss()
    optimizer = make(model.parameters())
    training = poptorch.trainingModel(model, options or poptorch.Options(), optimizer)
    for _ in range(steps):
        training(X, Y)
    return model, optimizer


def _eager(make: Any, steps: int = 4) -> tuple[Any, Any]:
    """The module and optimiser after ``steps`` eager PyTorch steps on the same data."""
    model = _Loss()
    optimizer = make(model.parameters())
    for _ in range(steps):
        optimizer.zero_grad()
        model(X, Y).backward()
        optimizer.step()
    return model, optimizer


def _assert_states_close(got: dict, want: dict, atol: float = 1e-6) -> None:
    """Two ``state_dict()["state"]``: the same parameters, keys (in order), dtypes, values."""
    assert list(got) == list(want) and want
    for index, entry in want.items():
        assert list(got[index]) == list(entry), (index, list(got[index]), list(entry))
        for key, value in entry.items():
            mine = got[index][key]
            assert mine.dtype == value.dtype and mine.shape == value.shape, (index, key)
            np.testing.assert_allclose(mine.numpy(), value.numpy(), rtol=1e-5, atol=atol)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: poptorch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
        lambda p: poptorch.optim.Adam(p, lr=0.05, weight_decay=0.1),
        lambda p: poptorch.optim.AdamW(p, lr=0.05, betas=(0.8, 0.99)),
        lambda p: poptorch.optim.RMSprop(p, lr=0.01),
        lambda p: poptorch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True, weight_decay=0.1),
    ],
    ids=["sgd-momentum", "sgd-nesterov", "adam", "adamw", "rmsprop", "rmsprop-centred"],
)
def test_state_dict_is_eager_pytorchs(make: Any) -> None:
    """After training, the optimiser's state dict is what eager PyTorch's holds: the same
    names, dtypes (``step`` a float32 scalar) and values within float rounding."""
    _, optimizer = _trained(make)
    _assert_states_close(optimizer.state_dict()["state"], _eager(make)[1].state_dict()["state"])


def _two_groups(params: Any) -> Any:
    """SGD with momentum for the weight, none (so no state) for the bias, as PyTorch keeps."""
    weight, bias = params
    return torch.optim.SGD(
        [{"params": [weight], "momentum": 0.9}, {"params": [bias], "lr": 0.05}], lr=0.1
    )


@pytest.mark.parametrize(
    "make",
    [_two_groups, lambda p: torch.optim.AdamW([{"params": [q]} for q in p], lr=0.05)],
    ids=["sgd-momentum-in-one-group", "adamw-two-groups"],
)
def test_parameter_groups_state_dict_is_eager_pytorchs(make: Any) -> None:
    """Per-group state (``optax.multi_transform``) lands on each group's parameters, and a
    group without momentum keeps none, as in PyTorch."""
    _, optimizer = _trained(make)
    state = optimizer.state_dict()["state"]
    _assert_states_close(state, _eager(make)[1].state_dict()["state"])


def test_lamb_state_follows_its_formula() -> None:
    """LAMB's state in the names and types of PopTorch's ``LAMB.step`` (``step`` an int,
    Adam's moments), equal to its formula run in float64 on the same gradients."""
    lr, wd, b1, b2, eps = 0.05, 0.1, 0.9, 0.999, 1e-8
    _, optimizer = _trained(lambda p: poptorch.optim.LAMB(p, lr=lr, weight_decay=wd))
    reference = _Loss()
    weights = [p.detach().numpy().astype(np.float64) for p in reference.parameters()]
    m = [np.zeros_like(w) for w in weights]
    v = [np.zeros_like(w) for w in weights]
    for t in range(1, 5):
        with torch.no_grad():
            for p, w in zip(reference.parameters(), weights, strict=True):
                p.copy_(torch.from_numpy(w))
        reference.zero_grad()
        reference(X, Y).backward()
        for i, p in enumerate(reference.parameters()):
            g = p.grad.numpy().astype(np.float64)
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            u = (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps) + wd * weights[i]
            ratio = np.linalg.norm(weights[i]) / np.linalg.norm(u)
            weights[i] = weights[i] - lr * ratio * u
    state = optimizer.state_dict()["state"]
    for i in range(len(weights)):
        assert list(state[i]) == ["step", "exp_avg", "exp_avg_sq"] and state[i]["step"] == 4
        np.testing.assert_allclose(state[i]["exp_avg"].numpy(), m[i], rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(state[i]["exp_avg_sq"].numpy(), v[i], rtol=1e-4, atol=1e-9)


def test_detach_and_destroy_write_the_state_into_the_optimiser() -> None:
    """``detachFromDevice`` fills ``optimizer.state`` itself (not only ``state_dict()``), and
    a new optimiser given by ``setOptimizer`` reads the same state."""
    model = _Loss()
    optimizer = poptorch.optim.Adam(model.parameters(), lr=0.05)
    training = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    training(X, Y)
    assert not optimizer.state
    training.detachFromDevice()
    assert float(optimizer.state[model.linear.weight]["step"]) == 1.0
    newer = poptorch.optim.Adam(model.parameters(), lr=0.01)
    training.setOptimizer(newer)
    training(X, Y)
    assert float(newer.state_dict()["state"][0]["step"]) == 2.0
    training.destroy()
    assert float(newer.state[model.linear.bias]["step"]) == 2.0


def test_load_state_dict_on_a_live_model_writes_its_state() -> None:
    """PopTorch's optimiser ``load_state_dict`` writes the state to the IPU: after it, the
    model's state is the loaded one, and training goes on from it."""
    model = _Loss()
    optimizer = poptorch.optim.Adam(model.parameters(), lr=0.05)
    training = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    training(X, Y)
    first = copy.deepcopy(optimizer.state_dict())
    training(X, Y)
    optimizer.load_state_dict(first)
    again = optimizer.state_dict()["state"]
    for index, entry in first["state"].items():
        assert all(torch.equal(again[index][k], v) for k, v in entry.items()), index
    training(X, Y)
    assert float(optimizer.state_dict()["state"][0]["step"]) == 2.0


def test_a_state_from_eager_pytorch_is_the_start() -> None:
    """An optimiser stepped by eager PyTorch, then wrapped: training goes on from its state
    as PyTorch's own steps do (its layout is PyTorch's)."""
    make = lambda p: poptorch.optim.AdamW(p, lr=0.05)  # noqa: E731
    eager_model, eager = _eager(make, steps=2)
    model = _Loss()
    model.load_state_dict(eager_model.state_dict())
    optimizer = make(model.parameters())
    optimizer.load_state_dict(eager.state_dict())
    training = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    for _ in range(2):
        training(X, Y)
    want, wanted = _eager(make, steps=4)
    for got, ref in zip(model.parameters(), want.parameters(), strict=True):
        np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), atol=1e-6)
    _assert_states_close(optimizer.state_dict()["state"], wanted.state_dict()["state"])


def test_resume_in_a_new_process_is_bit_for_bit(tmp_path: Path) -> None:
    """Train 3 steps, ``torch.save`` the model's and optimiser's state dicts, load them in a
    new Python process and train 2 more: the weights and optimiser state are those of an
    uninterrupted 5-step run, bit for bit (SGD with momentum, AdamW, RMSprop, LAMB)."""
    program = runpy.run_path(str(PROGRAM))
    names = list(program["OPTIMISERS"])
    checkpoint, out = tmp_path / "checkpoint.pt", tmp_path / "resumed.pt"
    torch.save({name: program["train"](name, 0, 3) for name in names}, checkpoint)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, str(PROGRAM), str(checkpoint), "3", "2", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=within(600),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    resumed = torch.load(out)
    for name in names:
        whole = program["train"](name, 0, 5)
        for key, value in whole["model"].items():
            assert torch.equal(resumed[name]["model"][key], value), (name, key)
        state = whole["optimizer"]["state"]
        assert state and list(resumed[name]["optimizer"]["state"]) == list(state), name
        for index, entry in state.items():
            again = resumed[name]["optimizer"]["state"][index]
            assert list(again) == list(entry), (name, index)
            for key, value in entry.items():
                if isinstance(value, torch.Tensor):  # LAMB's step is an int (PopTorch's)
                    assert torch.equal(again[key], value), (name, index, key)
                else:
                    assert again[key] == value, (name, index, key)


def test_sharded_state_is_gathered_alike_on_one_and_two_instances(tmp_path: Path) -> None:
    """Under ``poprun-emu``, AdamW's state sharded over 4 replicas on one instance and on two
    (two each): every instance reads ``state_dict()``, and both give the same bits."""
    launcher, env = poprun_emu()
    saved = []
    for instances in (1, 2):
        out = tmp_path / f"sharded{instances}.pt"
        words = ["--num-replicas", "4", "--num-instances", str(instances)]
        run = subprocess.run(
            [launcher, *words, str(PROGRAM), "--sharded", str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=within(600),
        )
        assert run.returncode == 0, run.stderr[-2000:]
        saved.append(torch.load(out))
    one, two = saved
    assert one["optimizer"]["state"], "no optimiser state"
    for key, value in one["model"].items():
        assert torch.equal(two["model"][key], value), key
    for index, entry in one["optimizer"]["state"].items():
        for key, value in entry.items():
            assert torch.equal(two["optimizer"]["state"][index][key], value), (index, key)


def test_replicated_tensor_sharding_gathers_the_state() -> None:
    """Under RTS (4 replicas sharding Adam's state) the state dict is the whole state, as
    without sharding, and a loaded state is sharded back: the next step matches."""
    rts = poptorch.Options().replicationFactor(4)
    rts.TensorLocations.setOptimizerLocation(
        poptorch.TensorLocationSettings().useReplicatedTensorSharding(True)
    )
    make = lambda p: poptorch.optim.Adam(p, lr=0.05)  # noqa: E731
    x, y = torch.cat([X] * 4), torch.cat([Y] * 4)
    states, weights = [], []
    for options in (poptorch.Options().replicationFactor(4), rts):
        model = _Loss()
        optimizer = make(model.parameters())
        training = poptorch.trainingModel(model, options, optimizer)
        for _ in range(2):
            training(x, y)
        states.append(optimizer.state_dict())
        resumed = make(model.parameters())
        resumed.load_state_dict(states[-1])
        again = poptorch.trainingModel(model, options, resumed)
        again(x, y)
        again.copyWeightsToHost()
        weights.append([p.detach().numpy().copy() for p in model.parameters()])
        assert float(resumed.state_dict()["state"][0]["step"]) == 3.0
    _assert_states_close(states[1]["state"], states[0]["state"])
    for got, want in zip(weights[1], weights[0], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    ("saved", "make", "match"),
    [
        (
            lambda p: torch.optim.Adam(p, lr=0.1),
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "no tensor 'momentum_buffer'",
        ),
        (
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            lambda p: torch.optim.SGD(p, lr=0.1),
            "does not keep",
        ),
    ],
    ids=["adam-into-sgd", "momentum-into-plain-sgd"],
)
def test_another_optimisers_state_refused_in_one_line(saved: Any, make: Any, match: str) -> None:
    state = _eager(saved, steps=1)[1].state_dict()
    model = _Loss()
    state["param_groups"] = make(model.parameters()).state_dict()["param_groups"]  # settings
    _refused(make, model, state, match)


def test_unmappable_states_refused_in_one_line() -> None:
    make = lambda p: torch.optim.Adam(p, lr=0.1)  # noqa: E731
    state = _eager(make, steps=1)[1].state_dict()
    wrong = {**state, "state": {**state["state"], 1: {**state["state"][1]}}}
    wrong["state"][1]["exp_avg"] = torch.zeros(5)
    _refused(make, _Loss(), wrong, r"has shape \[5\], the weight \[3\]")
    wrong["state"][1] = {**state["state"][1], "step": torch.tensor(7.0)}
    _refused(make, _Loss(), wrong, r"at steps \[1, 7\]")
    _refused(make, _Loss(), {**state, "state": {0: state["state"][0]}}, "no entry for linear.bias")


def _refused(make: Any, model: Any, state: dict, match: str) -> None:
    """Training ``model`` with ``make``'s optimiser loaded with ``state`` is refused in one
    line, before any step."""
    optimizer = make(model.parameters())
    optimizer.load_state_dict(state)
    before = [p.detach().clone() for p in model.parameters()]
    training = poptorch.trainingModel(model, poptorch.Options(), optimizer)
    with pytest.raises(ValueError, match=match) as info:
        training(X, Y)
    assert "\n" not in str(info.value)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
