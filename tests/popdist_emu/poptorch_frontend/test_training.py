"""A PopTorch program trains on the emulator as plain PyTorch does, layout-independently.

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from deadlines import within

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

PROGRAM = Path(__file__).parents[3] / "examples" / "poptorch_tutorial.py"
STEPS = 20


def _result(launcher: list[str], *words: str) -> dict:
    """Runs the program under ``launcher``; its JSON line."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = [*launcher, str(PROGRAM), *words]
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=within(300))
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run(tmp_path: Path, launcher: list[str], *extra: str) -> tuple[list[float], dict]:
    """Runs ``STEPS`` steps under ``launcher``; the losses and the saved parameters."""
    save = tmp_path / f"run{len(list(tmp_path.iterdir()))}.npz"
    result = _result(launcher, "--steps", str(STEPS), "--lr", "0.01", "--save", str(save), *extra)
    return result["losses"], dict(np.load(save))


def _poprun(instances: int, replicas: int = 2) -> list[str]:
    launcher = shutil.which("poprun-emu", path=str(Path(sys.executable).parent))
    assert launcher is not None, "poprun-emu is not installed beside this Python"
    return [
        launcher,
        "--num-replicas",
        str(replicas),
        "--num-instances",
        str(instances),
        "--only-output-from-instance",
        "0",
    ]


@pytest.fixture(scope="module")
def one_instance(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[float], dict]:
    """The program's 20 steps on 2 replicas of 1 IPU, one instance (run once, compared often)."""
    return _run(tmp_path_factory.mktemp("one"), _poprun(1))


def test_matches_plain_pytorch_and_is_layout_independent(
    tmp_path: Path, one_instance: tuple[list[float], dict]
) -> None:
    """Tens of steps: within float tolerance of PyTorch; bit-identical on 1 and 2 instances."""
    ref_losses, ref = _run(tmp_path, [sys.executable], "--reference", "2")
    one_losses, one = one_instance
    two_losses, two = _run(tmp_path, _poprun(2))
    assert len(one_losses) == STEPS
    np.testing.assert_allclose(one_losses, ref_losses, rtol=1e-5, atol=1e-5)
    for name, value in ref.items():
        np.testing.assert_allclose(one[name], value, rtol=1e-3, atol=1e-4, err_msg=name)
        assert np.array_equal(one[name], two[name]), name
    assert one_losses == two_losses


def test_four_replicas_give_the_same_bits_on_one_and_two_instances(tmp_path: Path) -> None:
    """``popdist.poptorch.Options`` under PopRun's layouts of 4 replicas, all on one instance
    and two on each of two: every instance its share of the data, the same parameters and
    losses, bit for bit (one replica an instance is compared in the test above)."""
    runs = [_run(tmp_path, _poprun(n, replicas=4)) for n in (1, 2)]
    (losses, params), *others = runs
    for other_losses, other in others:
        assert other_losses == losses
        for name, value in params.items():
            assert np.array_equal(other[name], value), name


def test_the_tutorial_learns_on_four_ipus() -> None:
    """The issue's command: 1 replica over the tutorial's 4 IPUs, PopTorch's default strategy
    (pipelined); two epochs of the digits lift the test accuracy far above chance (10 %)."""
    launcher = _poprun(1)[0]
    words = ["--num-replicas", "1", "--ipus-per-replica", "4", "--only-output-from-instance", "0"]
    result = _result([launcher, *words])
    losses = result["losses"]
    assert result["accuracy"] > 0.8, result["accuracy"]
    assert np.mean(losses[-20:]) < 0.25 * np.mean(losses[:20])


def test_blocks_on_four_ipus_train_as_on_one(
    tmp_path: Path, one_instance: tuple[list[float], dict]
) -> None:
    """BeginBlock on IPUs 0-3 with PopTorch's default strategy (pipelined) and sharded:
    the same bits as each other, and one IPU's numbers within float rounding (one IPU
    computes a replica's micro-batches together, the stages one at a time)."""
    one_losses, one = one_instance
    four = [*_poprun(1), "--ipus-per-replica", "4"]
    runs = [
        _run(tmp_path, four, *(("--strategy", s) if s else ()))
        for s in ("", "sharded")  # test_split: the default resolves to "pipelined"
    ]
    (losses, params), *others = runs
    for other_losses, other in others:
        assert other_losses == losses
        for name, value in params.items():
            assert np.array_equal(other[name], value), name
    np.testing.assert_allclose(losses, one_losses, rtol=1e-5, atol=1e-6)
    for name, value in one.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-3, atol=1e-4, err_msg=name)


def test_bad_combined_batch_refused_in_one_line() -> None:
    """A call whose batch is not a whole combined batch is refused in one line."""
    import torch

    import popdist_emu.poptorch as poptorch

    opts = poptorch.Options().deviceIterations(3)
    model = poptorch.trainingModel(_Loss(), opts, torch.optim.SGD(_Loss().parameters(), lr=0.1))
    with pytest.raises(ValueError, match="multiple of device iterations") as info:
        model(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long))
    assert "\n" not in str(info.value)


def test_bad_strategy_refused_in_one_line() -> None:
    import popdist_emu.poptorch as poptorch

    opts = poptorch.Options().setExecutionStrategy("pipelined")
    with pytest.raises(ValueError, match=r"pass poptorch\.PipelinedExecution"):
        poptorch.trainingModel(_Loss(), opts)


def _Loss():  # noqa: N802
    import torch

    class Loss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 3)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self.linear(x), y)

    torch.manual_seed(0)
    return Loss()


def test_set_optimizer_changes_the_learning_rate_as_pytorch_does() -> None:
    """``setOptimizer`` keeps Adam's state and takes the new rate, as torch.optim does."""
    import torch

    import popdist_emu.poptorch as poptorch

    x = torch.linspace(-1, 1, 16).reshape(8, 2)
    y = torch.arange(8) % 3
    model, reference = _Loss(), _Loss()
    torch_opt = torch.optim.Adam(reference.parameters(), lr=0.1)
    wrapped = poptorch.trainingModel(
        model, poptorch.Options(), poptorch.optim.Adam(model.parameters(), lr=0.1)
    )
    for step in range(6):
        if step == 3:
            wrapped.setOptimizer(poptorch.optim.Adam(model.parameters(), lr=0.01))
            torch_opt.param_groups[0]["lr"] = 0.01
        loss = wrapped(x, y)
        torch_opt.zero_grad()
        expected = reference(x, y)
        expected.backward()
        torch_opt.step()
        assert abs(float(loss) - float(expected.detach())) < 1e-5
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="learning rate only"):
        wrapped.setOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))


def _train_lamb(rts: bool, steps: int = 4) -> tuple[list[float], list[np.ndarray], object]:
    """The loss wrapper trained with PopTorch's LAMB on 4 replicas, with or without RTS."""
    import torch

    import popdist_emu.poptorch as poptorch

    x = torch.linspace(-1, 1, 32).reshape(16, 2)
    y = torch.arange(16) % 3
    model = _Loss()
    opts = poptorch.Options().replicationFactor(4)
    if rts:
        opts.TensorLocations.setOptimizerLocation(
            poptorch.TensorLocationSettings().useReplicatedTensorSharding(True)
        )
    lamb = poptorch.optim.LAMB(model.parameters(), lr=0.05, weight_decay=0.1)
    wrapped = poptorch.trainingModel(model, opts, lamb)
    # Each call returns the 4 replicas' losses (OutputMode Final): their mean is the step's.
    losses = [float(wrapped(x, y).mean()) for _ in range(steps)]
    stage = wrapped._trainer.reduce_update  # the runtime's reduce-and-update stage
    return losses, [p.detach().numpy().copy() for p in model.parameters()], stage


def test_lamb_under_replicated_tensor_sharding_trains_as_without() -> None:
    """PopTorch's LAMB shards under RTS (its per-tensor norms reduced over the replicas) and
    trains as the unsharded LAMB does, within the norms' float32 rounding."""
    plain_losses, plain, _ = _train_lamb(rts=False)
    rts_losses, sharded, stage = _train_lamb(rts=True)
    assert getattr(stage, "layerwise", None) is not None  # sharded, with the norms' passes
    np.testing.assert_allclose(rts_losses, plain_losses, rtol=1e-6)
    assert plain_losses[-1] < plain_losses[0]
    for got, want in zip(sharded, plain, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_set_optimizer_changes_lambs_learning_rate() -> None:
    import torch

    import popdist_emu.poptorch as poptorch

    x = torch.linspace(-1, 1, 16).reshape(8, 2)
    y = torch.arange(8) % 3
    runs = []
    for new_lr in (0.05, 0.0):
        model = _Loss()
        wrapped = poptorch.trainingModel(
            model, poptorch.Options(), poptorch.optim.LAMB(model.parameters(), lr=0.05)
        )
        wrapped(x, y)
        wrapped.setOptimizer(poptorch.optim.LAMB(model.parameters(), lr=new_lr))
        before = [p.detach().numpy().copy() for p in model.parameters()]
        wrapped(x, y)
        wrapped.copyWeightsToHost()
        runs.append(
            [
                np.abs(p.detach().numpy() - b).max()
                for p, b in zip(model.parameters(), before, strict=True)
            ]
        )
    assert min(runs[0]) > 0 and max(runs[1]) == 0  # a zero rate leaves the weights alone


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")
@pytest.mark.parametrize("where", ["on chip", "offloaded", "sharded"])
def test_set_optimizer_after_a_scheduler_step_changes_each_groups_rate(where: str) -> None:
    """Two parameter groups (BERT's and GPT-2's: no weight decay on biases) and a scheduler
    stepped before each ``setOptimizer``, as those programs do: every group's new rate is
    taken, with the optimiser state on chip, offloaded (BERT's default) or sharded over 2
    replicas (RTS), and training follows PyTorch eager step for step, for AdamW and for
    LAMB's groups (whose rate 0 must leave the weights alone)."""
    import torch

    import popdist_emu.poptorch as poptorch

    x = torch.linspace(-1, 1, 16).reshape(8, 2)
    y = torch.arange(8) % 3

    def groups(model: torch.nn.Module) -> list[dict]:
        linear = model.get_submodule("linear")
        return [
            {"params": [linear.weight], "weight_decay": 0.1},
            {"params": [linear.bias], "weight_decay": 0.0, "lr": 0.05},
        ]

    model, reference = _Loss(), _Loss()
    optimizer = torch.optim.AdamW(groups(model), lr=0.1)
    torch_opt = torch.optim.AdamW(groups(reference), lr=0.1)
    schedules = [
        torch.optim.lr_scheduler.LambdaLR(o, lambda s: 0.5**s) for o in (optimizer, torch_opt)
    ]
    opts = poptorch.Options().replicationFactor(2 if where == "sharded" else 1)
    opts.TensorLocations.setOptimizerLocation(
        poptorch.TensorLocationSettings()
        .useOnChipStorage(where != "offloaded")
        .useReplicatedTensorSharding(where == "sharded")
    )
    wrapped = poptorch.trainingModel(model, opts, optimizer)
    for _ in range(4):
        loss = wrapped(x, y).mean()  # sharded: each replica's loss of half the batch
        torch_opt.zero_grad()
        expected = reference(x, y)
        expected.backward()
        torch_opt.step()
        for schedule in schedules:
            schedule.step()
        wrapped.setOptimizer(optimizer)
        assert abs(float(loss) - float(expected.detach())) < 1e-5
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-5)
    lamb = poptorch.optim.LAMB(groups(model), lr=0.05)
    wrapped = poptorch.trainingModel(model, opts.clone(), lamb)
    wrapped(x, y)
    for group in lamb.param_groups:
        group["lr"] = 0.0
    wrapped.setOptimizer(lamb)
    before = [p.detach().numpy().copy() for p in model.parameters()]
    wrapped(x, y)
    wrapped.copyWeightsToHost()
    for got, want in zip(model.parameters(), before, strict=True):
        np.testing.assert_array_equal(got.detach().numpy(), want)
