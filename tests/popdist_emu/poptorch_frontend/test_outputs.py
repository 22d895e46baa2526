"""What a call returns: each local replica's outputs, the loss included, micro-batch by
micro-batch, laid out as PopTorch lays them out for OutputMode All, Final, EveryN, Sum and
Default, in training (plain, pipelined, sharded) and inference, on one instance and on two
(a real ``poprun-emu`` job), against PyTorch eager micro-batch by micro-batch.

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

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

import popdist_emu.poptorch as poptorch  # noqa: E402

ITERATIONS, ACCUMULATION, MICRO = 4, 2, 3
LR = 0.5
MODES = [("All", 1), ("Final", 1), ("EveryN", 2), ("Sum", 1)]


def within(seconds: float) -> float:
    """``deadlines.within``, imported when a test runs: instances' scripts import this module
    with only its own folder on the path."""
    from deadlines import within as scaled

    return scaled(seconds)


class _Net(torch.nn.Module):
    """Two dense layers; the forward returns the logits, their argmax, the micro-batch's
    accuracy (a scalar), a ``[1]``-shaped sum and the loss; with ``ipus`` > 1 the layers are
    blocks on two IPUs."""

    def __init__(self, ipus: int = 1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.hidden = torch.nn.Linear(6, 8)
        self.head = torch.nn.Linear(8, 3)
        if ipus > 1:
            poptorch.BeginBlock(self.hidden, "hidden", ipu_id=0)
            poptorch.BeginBlock(self.head, "head", ipu_id=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.head(torch.relu(self.hidden(x)))
        argmax = logits.argmax(dim=1)
        accuracy = (argmax == y).float().mean()
        total = logits.sum().reshape(1)
        return logits, argmax, accuracy, total, torch.nn.functional.cross_entropy(logits, y)


def _eager(
    reference: torch.nn.Module,
    parts: list[tuple[torch.Tensor, torch.Tensor]],
    total: int,
    accumulation: int = ACCUMULATION,
) -> list[list[list[tuple[torch.Tensor, ...]]]]:
    """PyTorch eager: each instance's combined batch in ``parts`` laid out ``[iterations,
    accumulation, local replicas, micro]``; per device iteration every micro-batch's outputs
    from that iteration's weights, then SGD on the mean over all ``total`` replicas'
    micro-batches. Returns ``[instance][iteration x accumulation x replica]`` outputs."""
    optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    local = total // len(parts)
    out: list[list[list[tuple[torch.Tensor, ...]]]] = [[] for _ in parts]
    shape = (ITERATIONS, accumulation, local, MICRO)
    laid = [(x.reshape(*shape, 6), y.reshape(shape)) for x, y in parts]
    for d in range(ITERATIONS):
        optimizer.zero_grad()
        for i, (x, y) in enumerate(laid):
            for a in range(accumulation):
                row = []
                for k in range(local):
                    values = reference(x[d, a, k], y[d, a, k])
                    (values[-1] / (accumulation * total)).backward()
                    row.append(tuple(v.detach() for v in values))
                out[i].append(row)
        optimizer.step()
    return out


def _poptorch_layout(
    rows: list[list[tuple[torch.Tensor, ...]]], mode: str, period: int, iterations: int, acc: int
) -> list[torch.Tensor]:
    """PopTorch's host layout written out plainly: ``rows[d * acc + a][k]`` the outputs of
    micro-batch ``a`` of iteration ``d`` on replica ``k``."""
    if mode == "Final":
        picked = [rows[-1]]
    elif mode == "EveryN":
        picked = [
            rows[d * acc + a] for d in range(period - 1, iterations, period) for a in range(acc)
        ]
    else:
        picked = rows
    replicas = len(rows[0])
    outputs = []
    for j in range(len(rows[0][0])):
        if mode == "Sum":
            values = [sum(row[k][j] for row in picked) for k in range(replicas)]
        else:
            values = [row[k][j] for row in picked for k in range(replicas)]
        if values[0].ndim == 0:
            stacked = torch.stack([torch.as_tensor(v) for v in values])
            outputs.append(stacked.reshape(()) if stacked.numel() == 1 else stacked)
        else:
            outputs.append(torch.cat(values))
    return outputs


def _check(got: tuple[torch.Tensor, ...], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert tuple(g.shape) == tuple(w.shape), (g.shape, w.shape)
        np.testing.assert_allclose(g.double().numpy(), w.double().numpy(), rtol=2e-5, atol=2e-5)


def _data(size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(size, 6, generator=generator), torch.randint(
        0, 3, (size,), generator=generator
    )


def _options(mode: str, period: int, replicas: int) -> poptorch.Options:
    opts = poptorch.Options().deviceIterations(ITERATIONS).replicationFactor(replicas)
    opts.Training.gradientAccumulation(ACCUMULATION)
    return opts.outputMode(getattr(poptorch.OutputMode, mode), period)


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize(("mode", "period"), MODES)
def test_each_replicas_outputs_per_micro_batch_as_pytorch(
    mode: str, period: int, replicas: int
) -> None:
    """Four device iterations of two micro-batches on each local replica, two calls: every
    output (logits, argmax, a scalar accuracy, a ``[1]`` sum, the loss) of the micro-batches
    the mode returns, each from its own iteration's weights, per replica, never a mean over
    replicas (All: 16 losses with 2 replicas; Final: one per replica; EveryN(2): those of
    iterations 1 and 3; Sum: each replica's sum)."""
    emulated, reference = _Net(), _Net()
    training = poptorch.trainingModel(
        emulated, _options(mode, period, replicas), torch.optim.SGD(emulated.parameters(), lr=LR)
    )
    size = ITERATIONS * ACCUMULATION * replicas * MICRO
    for call in range(2):
        x, y = _data(size, call)
        got = training(x, y)
        rows = _eager(reference, [(x, y)], replicas)[0]
        _check(got, _poptorch_layout(rows, mode, period, ITERATIONS, ACCUMULATION))
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(
            emulated.state_dict()[name].numpy(), value.numpy(), rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize("strategy", ["pipelined", "sharded"])
@pytest.mark.parametrize(("mode", "period"), [("All", 1), ("Final", 1), ("EveryN", 2), ("Sum", 1)])
def test_blocks_on_two_ipus_return_what_one_program_returns(
    monkeypatch: pytest.MonkeyPatch, strategy: str, mode: str, period: int
) -> None:
    """BeginBlock on two IPUs, pipelined and sharded: the same outputs, laid out the same,
    as PyTorch eager (each micro-batch's from its own iteration's weights)."""
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    emulated, reference = _Net(ipus=2), _Net()
    opts = _options(mode, period, 1)
    opts.Training.gradientAccumulation(4)  # at least 2 x 2 stages - 1
    if strategy == "sharded":
        opts.setExecutionStrategy(poptorch.ShardedExecution())
    training = poptorch.trainingModel(emulated, opts, torch.optim.SGD(emulated.parameters(), lr=LR))
    x, y = _data(ITERATIONS * 4 * MICRO, 3)
    got = training(x, y)
    assert training._trainer.pipeline is not None
    rows = _eager(reference, [(x, y)], 1, accumulation=4)[0]
    _check(got, _poptorch_layout(rows, mode, period, ITERATIONS, 4))


@pytest.mark.parametrize(
    ("mode", "period"), [("All", 1), ("Final", 1), ("EveryN", 2), ("Sum", 1), ("Default", 1)]
)
def test_inference_returns_each_replicas_micro_batches(mode: str, period: int) -> None:
    """Inference over four device iterations on two local replicas: each micro-batch's
    forward on its own (the accuracy is per micro-batch), laid out by the mode (Default is
    All in inference)."""
    model = _Net().eval()
    opts = poptorch.Options().deviceIterations(ITERATIONS).replicationFactor(2)
    opts.outputMode(getattr(poptorch.OutputMode, mode), period)
    inference = poptorch.inferenceModel(model, opts)
    x, y = _data(ITERATIONS * 2 * MICRO, 5)
    got = inference(x, y)
    with torch.no_grad():
        parts = [model(a, b) for a, b in zip(x.split(MICRO), y.split(MICRO), strict=True)]
    rows = [[parts[2 * d], parts[2 * d + 1]] for d in range(ITERATIONS)]
    _check(got, _poptorch_layout(rows, "All" if mode == "Default" else mode, period, ITERATIONS, 1))


def test_a_one_element_output_comes_back_once_per_micro_batch() -> None:
    """A ``[1]``-shaped output under All with two device iterations comes back as two values
    (one per micro-batch), the loss as ``[2]``; under Default (Final in training) one replica's
    last loss is a 0-d tensor and the ``[1]`` output keeps its shape (PopTorch's
    ``test_trainingOutputModes``)."""
    shapes = {}
    for mode in ("All", "Default"):
        opts = poptorch.Options().deviceIterations(2).outputMode(poptorch.OutputMode[mode])
        *_, total, loss = poptorch.trainingModel(_Net(), opts)(*_data(2 * MICRO, 1))
        shapes[mode] = (tuple(total.shape), tuple(loss.shape))
    assert shapes == {"All": ((2,), (2,)), "Default": ((1,), ())}


MULTI = """
import json, sys
import torch
import popdist, popdist.poptorch
import poptorch
sys.path.insert(0, sys.argv[1])
from test_outputs import _Net, _data, _options, ITERATIONS, ACCUMULATION, MICRO, MODES, LR

out = {}
for mode, period in MODES:
    model = _Net()
    opts = _options(mode, period, popdist.getNumLocalReplicas())
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=LR))
    size = ITERATIONS * ACCUMULATION * popdist.getNumLocalReplicas() * MICRO
    x, y = _data(size, 10 + popdist.getInstanceIndex())
    out[mode] = [t.tolist() for t in training(x, y)]
with open(sys.argv[2] + f"/instance{popdist.getInstanceIndex()}.json", "w") as f:
    json.dump(out, f)
"""


def test_two_instances_each_return_their_own_replicas_outputs(tmp_path: Path) -> None:
    """``poprun-emu --num-replicas 2 --num-instances 2``: each instance returns its own
    replica's outputs, micro-batch by micro-batch, for every mode, as PyTorch eager computes
    them with both replicas' gradients (not the mean over the replicas)."""
    program = tmp_path / "multi.py"
    program.write_text(MULTI)
    launcher = shutil.which("poprun-emu", path=str(Path(sys.executable).parent))
    assert launcher is not None, "poprun-emu is not installed beside this Python"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = [launcher, "--num-replicas", "2", "--num-instances", "2", str(program)]
    here = str(Path(__file__).parent)
    out = subprocess.run(
        [*command, here, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=within(600),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    size = ITERATIONS * ACCUMULATION * MICRO
    parts = [_data(size, 10 + i) for i in range(2)]
    for mode, period in MODES:
        rows = _eager(_Net(), parts, 2)
        for i in range(2):
            got = json.loads((tmp_path / f"instance{i}.json").read_text())[mode]
            want = _poptorch_layout(rows[i], mode, period, ITERATIONS, ACCUMULATION)
            _check(tuple(torch.tensor(g) for g in got), want)


def test_sum_and_every_n_are_accepted_and_a_bad_period_refused() -> None:
    opts = poptorch.Options().deviceIterations(4).outputMode(poptorch.OutputMode.Sum)
    assert opts.poptorch_output_mode == "sum"
    opts.outputMode(poptorch.OutputMode.EveryN, 2)
    assert (opts.poptorch_output_mode, opts.output_return_period) == ("everyn", 2)
    with pytest.raises(ValueError, match=r"EveryN needs a period of at least 1") as info:
        poptorch.Options().outputMode(poptorch.OutputMode.EveryN)
    assert "\n" not in str(info.value)
    opts = poptorch.Options().deviceIterations(4).outputMode(poptorch.OutputMode.EveryN, 3)
    with pytest.raises(ValueError, match=r"must divide the 4 device iterations") as info:
        poptorch.trainingModel(_Net(), opts)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"outputMode\('every'\)"):
        poptorch.Options().outputMode("every")


def test_the_host_copies_follow_the_mode() -> None:
    """Micro-batches whose outputs a replica copies to the host per call (the hardware
    model's ``outputs_per_step``): All every one, EveryN(n) those of every n-th iteration,
    Final and Sum one (Sum adds up on the device)."""
    from popdist_emu.poptorch._outputs import OutputMode, outputs_per_step

    counts = {
        name: outputs_per_step(OutputMode(name, period), 4, 2)
        for name, period in (("all", 1), ("everyn", 2), ("final", 1), ("sum", 1))
    }
    assert counts == {"all": 8, "everyn": 4, "final": 1, "sum": 1}
