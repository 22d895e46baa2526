"""PopTorch names Graphcore's applications use, used as those programs use them.

``poptorch.enums`` and ``MatMulSerializationMode`` at import (BERT, GPT-2), option reads
(CNNs, ViT), ``torch.ops.poptorch`` name scopes in forward hooks (CNNs, Swin),
``poptorch.Attribute`` from forward hooks (BERT's ``outline_attribute``),
``serializedMatMul`` (BERT's ``SerializedLinear``), ``removeBlocks`` (SQuAD's
``deparallelize``), ``setLogLevel`` and ``enableSyntheticData``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from deadlines import within
from poprun_beside import run_program

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed")

import popdist_emu.poptorch as poptorch  # noqa: E402
from popdist_emu.poptorch import _names as names  # noqa: E402

F = torch.nn.functional
FINDER = (
    "import sys; sys.meta_path.append(__import__('launch._popdist_finder', "
    "fromlist=['x']).PopDistFallbackFinder)\n"
)


def _python(code: str) -> str:
    """``code`` in a fresh interpreter that finds ``poptorch`` as a program does."""
    out = subprocess.run(
        [sys.executable, "-c", FINDER + code], capture_output=True, text=True, timeout=within(300)
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_bert_and_gpt2_imports_work_without_the_sdk() -> None:
    """BERT's and GPT-2's import-time lines: ``from poptorch.enums import DataLoaderMode``,
    ``from poptorch.optim import LAMB`` (also as ``poptorch.optim.LAMB`` after ``import
    poptorch.optim``) and ``MatMulSerializationMode`` as a default; the CNNs' name-scope ops
    exist once ``poptorch`` is imported."""
    out = _python(
        "from poptorch.enums import DataLoaderMode\n"
        "import poptorch, poptorch.optim\n"
        "from poptorch.optim import AdamW, LAMB\n"
        "def linear(mode=poptorch.MatMulSerializationMode.OutputChannels): return mode\n"
        "import torch\n"  # after poptorch, as in the CNNs' models.py: its ops are there
        "torch.ops.poptorch.push_name_scope('conv1'); torch.ops.poptorch.pop_name_scope()\n"
        "print(DataLoaderMode.AsyncRebatched is poptorch.DataLoaderMode.AsyncRebatched,\n"
        "      poptorch.enums.DataLoaderMode.Sync is poptorch.DataLoaderMode.Sync,\n"
        "      poptorch.optim.LAMB is LAMB, linear().name)"
    )
    assert out == "True True True OutputChannels"


def test_option_reads_size_the_data_as_the_cnns_do() -> None:
    """``datasets.get_data``'s global batch: micro-batch x replicas x accumulation x device
    iterations, read back from the options; the reduction reads as PopTorch's enum value."""
    opts = poptorch.Options().deviceIterations(3)
    assert opts.Training.gradient_accumulation == 1
    opts.Training.gradientAccumulation(4)
    opts.Training.accumulationAndReplicationReductionType(poptorch.ReductionType.Sum)
    global_batch = 2 * opts.replication_factor * opts.Training.gradient_accumulation
    assert global_batch * opts.device_iterations == 24
    assert opts.Training.accumulation_and_replication_reduction_type == poptorch.ReductionType.Sum
    assert (opts.Distributed.processId, opts.Distributed.numProcesses) == (0, 1)
    assert opts.clone().Training.gradient_accumulation == 4


PROCESS_IDS = """
import popdist, popdist.poptorch, poptorch
opts = popdist.poptorch.Options()
d = opts.Distributed
print("ids", d.processId, d.numProcesses, d.distributed_process_id, d.num_distributed_processes,
      popdist.getInstanceIndex(), popdist.getNumInstances(), opts.replication_factor)
"""


def test_distributed_process_id_is_the_instance_under_poprun_emu(tmp_path: Path) -> None:
    """The CNNs shard their data by ``opts.Distributed.processId``/``numProcesses``: under
    ``poprun-emu`` those are PopDist's instance index and count."""
    options = ("--num-instances", "2", "--num-replicas", "4")
    out = run_program(tmp_path, "ids.py", PROCESS_IDS, *options, timeout=within(300))
    rows = sorted(
        line.split("ids", 1)[1].split() for line in out.stdout.splitlines() if "ids" in line
    )
    assert rows == [["0", "2", "0", "2", "0", "2", "2"], ["1", "2", "1", "2", "1", "2", "2"]]


def test_synthetic_data_is_set_either_way() -> None:
    opts = poptorch.Options()
    assert opts.enableSyntheticData(False) is opts and not opts.synthetic_data
    assert opts.enableSyntheticData(True).synthetic_data  # see test_synthetic.py


class _Bert(torch.nn.Module):
    """A layer with Graphcore's hooks: the CNNs' ``name_scope_hook`` on every module, BERT's
    ``outline_attribute`` (``poptorch.Attribute`` entered and left from forward hooks) and a
    ``SerializedLinear`` (``poptorch.serializedMatMul``)."""

    def __init__(self, hooks: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.hooks = hooks
        self.a = torch.nn.Linear(4, 8)
        self.b = torch.nn.Linear(8, 3, bias=False)
        if hooks:
            for name, m in self.named_modules():
                scope = name.split(".")[-1]
                m.register_forward_pre_hook(
                    lambda _m, _i, s=scope: torch.ops.poptorch.push_name_scope(s)
                )
                m.register_forward_hook(lambda _m, _i, _o: torch.ops.poptorch.pop_name_scope())
            context = poptorch.Attribute(__outline={"layer": "a"})
            self.a.register_forward_pre_hook(lambda _m, _i: context.__enter__())
            self.a.register_forward_hook(lambda _m, _i, _o: context.__exit__(None, None, None))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.a(x))
        if self.hooks:
            mode = poptorch.MatMulSerializationMode.OutputChannels
            out = poptorch.serializedMatMul(h, self.b.weight.t(), mode, 3)
        else:
            out = h @ self.b.weight.t()
        return out, F.cross_entropy(out, y)


def _classification(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 4, generator=generator), torch.randint(0, 3, (4,), generator=generator)


def _regression(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 4, generator=generator), torch.randn(4, 4, generator=generator)


def _losses(
    model: torch.nn.Module, wrapped: bool, steps: int = 3, batch=_classification
) -> list[float]:
    """``steps`` SGD steps on ``batch``'s data, through ``trainingModel`` or in PyTorch."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    step = poptorch.trainingModel(model, poptorch.Options(), optimizer) if wrapped else None
    generator = torch.Generator().manual_seed(4)
    losses = []
    for _ in range(steps):
        x, y = batch(generator)
        if step is not None:
            losses.append(float(step(x, y)[1]))
            continue
        optimizer.zero_grad()
        loss = model(x, y)[1]
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def test_hooks_attribute_and_serialized_matmul_train_as_plain_pytorch() -> None:
    """Name scopes and attributes change nothing, in eager PyTorch and under tracing; the
    serialised product is the product."""
    names._WARNED.discard("Attribute")  # named once per process: make this the first
    with pytest.warns(UserWarning, match="poptorch.Attribute: accepted, no effect"):
        hooked = _Bert(hooks=True)
    eager = _losses(_Bert(hooks=True), wrapped=False)
    assert eager == _losses(_Bert(hooks=False), wrapped=False)
    np.testing.assert_allclose(_losses(hooked, wrapped=True), eager, atol=1e-5)


def test_serialized_matmul_checks_its_arguments_as_poptorch_does() -> None:
    lhs, rhs = torch.ones(2, 6), torch.ones(6, 4)
    mode = poptorch.MatMulSerializationMode
    assert torch.equal(poptorch.serializedMatMul(lhs, rhs, mode.ReducingDim, 3), lhs @ rhs)
    for bad, match in [((mode.OutputChannels, 3), "size 4"), (("columns", 2), "mode='columns'")]:
        with pytest.raises(ValueError, match=match) as info:
            poptorch.serializedMatMul(lhs, rhs, *bad)
        assert "\n" not in str(info.value)


def test_remove_blocks_undoes_begin_block_so_a_model_can_be_blocked_again() -> None:
    """SQuAD's ``deparallelize``: ``removeBlocks`` then ``BeginBlock`` anew (PopTorch refuses
    a second ``BeginBlock`` on an annotated module)."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    poptorch.BeginBlock(model[1], "B", ipu_id=1)
    with pytest.raises(ValueError, match="already begins block"):
        poptorch.BeginBlock(model[1], "C", ipu_id=1)
    poptorch.removeBlocks(model)
    assert not model[1]._forward_pre_hooks
    poptorch.BeginBlock(model[1], "C", ipu_id=1)
    assert len(model[1]._forward_pre_hooks) == 1


@pytest.mark.parametrize("level", ["DEBUG", "ERR", 3])
def test_set_log_level_takes_poptorchs_levels(level: int | str) -> None:
    poptorch.setLogLevel(level)


def test_set_log_level_refuses_another_level_in_one_line() -> None:
    with pytest.raises(ValueError, match="PopTorch's levels are TRACE") as info:
        poptorch.setLogLevel("LOUD")
    assert "\n" not in str(info.value)


class _Looped(torch.nn.Module):
    """DINO's cast, an on-device loop, the CNNs' overlapped inputs and a ``MultiConv``."""

    def __init__(self, poptorch_ops: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.ops = poptorch_ops
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.ops:
            h = x
            for _ in range(3):
                h = torch.tanh(self.fc(h))
            return h, F.mse_loss(h.half().float(), y)
        mode = poptorch.OverlapMode.OverlapAccumulationLoop
        x = poptorch.set_overlap_for_input(x, mode)
        with poptorch.MultiConv().availableMemoryProportions(0.3).planType("parallel"):
            (h,) = poptorch.for_loop(3, lambda t: torch.tanh(self.fc(t)), [x])
        half = torch.ops.poptorch.internal_cast(h, "FLOAT16")
        assert half.dtype == torch.float16
        out = poptorch.set_overlap_for_output(h, mode)
        return out, F.mse_loss(torch.ops.poptorch.internal_cast(half, "FLOAT"), y)


def test_loop_cast_overlap_and_multiconv_train_as_plain_pytorch() -> None:
    eager = _losses_of(_Looped(poptorch_ops=False), wrapped=False)
    assert _losses_of(_Looped(poptorch_ops=True), wrapped=False) == eager
    np.testing.assert_allclose(_losses_of(_Looped(True), wrapped=True), eager, atol=1e-5)


def _losses_of(model: torch.nn.Module, wrapped: bool) -> list[float]:
    """Two SGD steps on regression data, through ``trainingModel`` or in PyTorch."""
    return _losses(model, wrapped, steps=2, batch=_regression)


def test_loop_cast_and_overlap_refuse_bad_arguments_in_one_line() -> None:
    x = torch.ones(2)
    cases = [
        (lambda: poptorch.for_loop(-1, torch.tanh, [x]), "for_loop(count=-1)"),
        (lambda: poptorch.for_loop(2, torch.tanh, (x,)), "pass a list of tensors"),
        (lambda: poptorch.for_loop(2, lambda t: (t, t), [x]), "returned 2 tensors for 1"),
        (lambda: poptorch.set_overlap_for_input(x, "overlap"), "pass a poptorch.OverlapMode"),
        (lambda: torch.ops.poptorch.internal_cast(x, "DOUBLE"), "internal_cast(dtype='DOUBLE')"),
        (lambda: poptorch.AsynchronousDataAccessor([x], rebatched_size=2), "rebatched_size=2"),
    ]
    for call, words in cases:
        with pytest.raises((ValueError, RuntimeError)) as info:
            call()
        assert words in str(info.value), str(info.value)


def test_asynchronous_data_accessor_yields_the_loaders_batches() -> None:
    dataset = torch.utils.data.TensorDataset(torch.arange(12.0).reshape(6, 2))
    loader = poptorch.DataLoader(poptorch.Options(), dataset, batch_size=2)
    accessor = poptorch.AsynchronousDataAccessor(
        loader, sharing_strategy=poptorch.SharingStrategy.SharedMemory
    )
    assert len(accessor) == len(loader) == 3
    for _ in range(2):  # each epoch the same batches, in order
        got = [batch[0].tolist() for batch in accessor]
        assert got == [
            [[0.0, 1.0], [2.0, 3.0]],
            [[4.0, 5.0], [6.0, 7.0]],
            [[8.0, 9.0], [10.0, 11.0]],
        ]
    accessor.terminate()


def test_mean_reduction_strategy_is_accepted_running_named_once() -> None:
    opts = poptorch.Options()
    strategy = poptorch.MeanReductionStrategy.Post
    assert opts.Training.setMeanAccumulationAndReplicationReductionStrategy(strategy) is opts
    from popdist_emu.popdist import _poptorch_groups

    _poptorch_groups._NOTED.discard("running mean")
    with pytest.warns(UserWarning, match="the same mean within float rounding"):
        opts.Training.setMeanAccumulationAndReplicationReductionStrategy(
            poptorch.enums.MeanReductionStrategy.Running
        )
    with pytest.raises(ValueError, match=r"pass a poptorch\.MeanReductionStrategy member"):
        opts.Training.setMeanAccumulationAndReplicationReductionStrategy("fast")
