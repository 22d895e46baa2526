"""Blocks of every PopTorch style, mixed in one model, found in the order they run.

``BeginBlock`` modules, ``with poptorch.Block`` contexts, ``Block.start`` and automatic ids
(``Block.useAutoId``) make the emulator's stages as PopTorch makes them; what PopTorch
refuses is refused in one line naming the block and the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed")
jax = pytest.importorskip("jax")

import popdist_emu.poptorch as poptorch  # noqa: E402

F = torch.nn.functional


class _TwoBlocks(torch.nn.Module):
    """The defect's model: a ``BeginBlock`` layer ``A`` on IPU 0, then ``with
    poptorch.Block("B", ipu_id=1)`` around the later operations (``style="mixed"``); the
    same model in one style (``"contexts"``) or without blocks (``"eager"``)."""

    inputs = 4

    def __init__(self, style: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.style = style
        self.a = torch.nn.Linear(4, 8)
        self.b = torch.nn.Linear(8, 3)
        if style == "mixed":
            poptorch.BeginBlock(self.a, "A", ipu_id=0)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.style == "contexts":
            with poptorch.Block("A", ipu_id=0):
                h = torch.relu(self.a(x))
        else:
            h = torch.relu(self.a(x))
        with poptorch.Block("B", ipu_id=1):
            out = self.b(h)
            loss = F.cross_entropy(out, y)
        return out, loss


def _train(
    model: torch.nn.Module, strategy: Any, steps: int, accumulation: int, batch: int
) -> tuple[list[float], Any]:
    """``steps`` calls of ``trainingModel`` on seeded batches: the losses (each call's mean
    over its micro-batches, which ``OutputMode.All`` returns one by one) and the model."""
    opts = poptorch.Options()
    opts.outputMode(poptorch.OutputMode.All)
    if strategy is not None:
        opts.setExecutionStrategy(strategy)
    opts.Training.gradientAccumulation(accumulation)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.3))
    generator = torch.Generator().manual_seed(4)
    losses = []
    for _ in range(steps):
        x = torch.randn(batch, model.inputs, generator=generator)
        y = torch.randint(0, 3, (batch,), generator=generator)
        losses.append(float(training(x, y)[1].mean()))
    return losses, training


def _eager(
    model: torch.nn.Module, steps: int, accumulation: int, batch: int
) -> tuple[list[float], torch.nn.Module]:
    """The same steps in PyTorch: the mean of the micro-batches' losses, one SGD step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    generator = torch.Generator().manual_seed(4)
    micro, losses = batch // accumulation, []
    for _ in range(steps):
        x = torch.randn(batch, model.inputs, generator=generator)
        y = torch.randint(0, 3, (batch,), generator=generator)
        optimizer.zero_grad()
        loss = sum(model(x[i : i + micro], y[i : i + micro])[1] for i in range(0, batch, micro))
        (loss / accumulation).backward()
        optimizer.step()
        losses.append(float(loss.detach()) / accumulation)
    return losses, model


@pytest.mark.parametrize(
    "strategy",
    [
        None,  # PopTorch's default: pipelined by the blocks' IPUs
        lambda: poptorch.PipelinedExecution(),  # AutoStage.SameAsIpu
        lambda: poptorch.PipelinedExecution("A", ["B"]),  # ids; the blocks' IPUs place them
        lambda: poptorch.ShardedExecution(poptorch.Stage("A"), poptorch.Stage("B")),
    ],
    ids=["default", "same-as-ipu", "block-ids", "sharded"],
)
def test_a_context_block_after_a_begin_block_makes_its_own_stage(
    monkeypatch: pytest.MonkeyPatch, strategy: Callable[[], Any] | None
) -> None:
    """The defect: ``with poptorch.Block("B", ipu_id=1)`` after a ``BeginBlock`` layer was
    dropped. Now two stages on IPUs 0 and 1, the losses and weights those of the same
    model in one style and of eager PyTorch."""
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    runs = {}
    for style in ("mixed", "contexts"):
        runs[style] = _train(_TwoBlocks(style), strategy and strategy(), 3, 4, 8)
    want, reference = _eager(_TwoBlocks("eager"), 3, 4, 8)
    for style, (losses, training) in runs.items():
        pipeline = training._trainer.pipeline
        assert [s.blocks for s in pipeline.stages] == [("A",), ("B",)], style
        assert pipeline.ipus == (0, 1)
        np.testing.assert_allclose(losses, want, rtol=1e-5, atol=1e-6, err_msg=style)
        np.testing.assert_allclose(
            training._user_model.b.weight.detach().numpy(),
            reference.b.weight.detach().numpy(),
            rtol=1e-5,
            atol=1e-6,
        )
    assert runs["mixed"][0] == runs["contexts"][0]  # one program, one style or another


class _SixBlocks(torch.nn.Module):
    """Six blocks in four styles: ``BeginBlock`` (named and not), ``with poptorch.Block``
    (the loss entering ``head`` again, as Graphcore's pipelining tutorial does) and
    ``Block.start``, on four IPUs."""

    inputs = 5

    def __init__(self, annotate: bool) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.annotate = annotate
        self.stem = torch.nn.Linear(5, 6)
        self.mix = torch.nn.Linear(6, 6)
        self.layer1 = torch.nn.Linear(6, 6)
        self.layer2 = torch.nn.Linear(6, 6)
        self.layer3 = torch.nn.Linear(6, 6)
        self.head = torch.nn.Linear(6, 3)
        if annotate:
            poptorch.BeginBlock(self.stem, "stem", ipu_id=0)
            poptorch.BeginBlock(self.layer1, ipu_id=1)  # no id: the first automatic, "0"
            poptorch.BeginBlock(self.layer2, "layer2", ipu_id=2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.stem(x))
        with poptorch.Block("mix", ipu_id=1) if self.annotate else _nothing():
            h = torch.tanh(self.mix(h))
        h = torch.relu(self.layer1(h))
        h = torch.sigmoid(self.layer2(h))
        if self.annotate:
            poptorch.Block.start("layer3", ipu_id=3)
        h = torch.sin(self.layer3(h))
        with poptorch.Block("head", ipu_id=3) if self.annotate else _nothing():
            out = self.head(h)
        with poptorch.Block("head") if self.annotate else _nothing():
            loss = F.cross_entropy(out, y)
        return out, loss


class _nothing:  # noqa: N801 (a stand-in for a context manager)
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _primitives(model: Any, params: dict, micro_batch: tuple) -> dict[str, set[str]]:
    """The primitives each block of a BlockModel runs, nested programs included."""

    def names(jaxpr: Any) -> set[str]:
        found = set()
        for eqn in jaxpr.eqns:
            found.add(eqn.primitive.name)
            for value in eqn.params.values():
                inner = getattr(value, "jaxpr", value)
                if hasattr(inner, "eqns"):
                    found |= names(inner)
        return found

    carry, found = micro_batch, {}
    for block in model.blocks:
        own = {k: params[k] for k in block.params}
        found[block.name] = names(jax.make_jaxpr(block.fn)(own, carry).jaxpr)
        carry = block.fn(own, carry)
    return found


def test_six_blocks_mixing_styles_make_six_stages_each_op_in_its_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``AutoIncrement`` makes a stage of each of the six blocks, in the order they run,
    each on its ``ipu_id``; every operation runs in its block (the head's cross-entropy in
    ``head``, not in the layer before it), and training follows eager PyTorch."""
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "4")
    strategy = poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement)
    losses, training = _train(_SixBlocks(annotate=True), strategy, 2, 12, 24)
    want, _ = _eager(_SixBlocks(annotate=False), 2, 12, 24)
    np.testing.assert_allclose(losses, want, rtol=1e-5, atol=1e-6)
    pipeline = training._trainer.pipeline
    order = ["stem", "mix", "0", "layer2", "layer3", "head"]
    assert [s.blocks for s in pipeline.stages] == [(name,) for name in order]
    assert pipeline.ipus == (0, 1, 1, 2, 3, 3)
    layers = {"stem": "stem", "mix": "mix", "0": "layer1", "layer2": "layer2"}
    layers |= {"layer3": "layer3", "head": "head"}
    for block in pipeline.model.blocks:
        assert block.params == (f"{layers[block.name]}.bias", f"{layers[block.name]}.weight")
    x = jax.numpy.ones((2, 5), np.float32)
    y = jax.numpy.zeros((2,), np.int32)
    ops = _primitives(pipeline.model, training._trainer.params, (x, y))
    unique = {"tanh": "mix", "logistic": "layer2", "sin": "layer3", "log": "head"}
    where = {op: [b for b, found in ops.items() if op in found] for op in unique}
    assert where == {op: [block] for op, block in unique.items()}  # log: the cross-entropy


class _AutoIds(torch.nn.Module):
    """PopTorch's ``Block.useAutoId`` example: blocks without ids are "0", "1", ..."""

    inputs = 4

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.c = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        poptorch.Block.useAutoId()
        with poptorch.Block(ipu_id=0):  # "0"
            h = torch.relu(self.a(x))
        with poptorch.Block("special", ipu_id=1):
            h = torch.relu(self.b(h))
        with poptorch.Block(ipu_id=1):  # "1"
            out = self.c(h)
            loss = F.cross_entropy(out, y)
        return out, loss


def test_use_auto_id_names_blocks_without_ids_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stages name the automatic ids; the model trains as PyTorch does."""
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    strategy = poptorch.PipelinedExecution(
        poptorch.Stage("0").ipu(0), poptorch.Stage("special", "1").ipu(1)
    )
    losses, training = _train(_AutoIds(), strategy, 2, 4, 8)
    want, _ = _eager(_AutoIds(), 2, 4, 8)
    np.testing.assert_allclose(losses, want, rtol=1e-5, atol=1e-6)
    assert [s.blocks for s in training._trainer.pipeline.stages] == [("0",), ("special", "1")]


class _Refused(torch.nn.Module):
    """A small model written the way each refusal needs (``case``)."""

    inputs = 4

    def __init__(self, case: str) -> None:
        super().__init__()
        self.case = case
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.case == "nested":
            with poptorch.Block("A", ipu_id=0):
                with poptorch.Block("inner", ipu_id=0):
                    x = self.a(x)
                x = torch.relu(x)  # after "inner" ended: PopTorch has no active block
        else:
            with poptorch.Block("A", ipu_id=1.5 if self.case == "bad-ipu" else 0):
                x = self.a(x)
            if self.case == "after":
                x = torch.relu(x)
        with poptorch.Block("B", ipu_id=0 if self.case == "two-ipus" else 1):
            out = self.b(x)
        with poptorch.Block(*(("A", None) if self.case == "apart" else ("B", 1))):
            loss = F.cross_entropy(out, y)
        return out, loss


@pytest.mark.parametrize(
    ("case", "strategy", "match"),
    [
        ("after", None, r"runs after `with poptorch.Block\('A'\):` ended, in no block;"),
        ("nested", None, r"'inner'\):` ended, in no block \(.* enclosing block 'A'\)"),
        ("two-ipus", None, r"block 'B' is entered on IPU 0 and again on IPU 1; .* same ipu_id"),
        ("bad-ipu", None, r"block 'A': ipu_id=1.5 is not an IPU index: give a whole number"),
        ("apart", ("A", "B"), r"block 'A' runs in two separate parts .*'B' runs between them"),
        ("ok", ("A", "C"), r"stage 1 names block 'C', which the model never runs .*\['A', 'B'\]"),
        ("ok", ("A",), r"block 'B' runs in the model but no stage holds it .*Stage\('B'\)"),
        ("ok", ("A", "B", "B"), r"block 'B' is in stage 1 and stage 2; .* list it once"),
        ("ok", (("A", "B"),), r"stage 0 holds blocks \['A', 'B'\] on IPUs \[0, 1\] .*\.ipu\(0\)"),
        ("ok", ("A", poptorch.AutoStage.SameAsIpu), r"an AutoStage goes alone"),
    ],
)
def test_what_poptorch_refuses_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, case: str, strategy: tuple | None, match: str
) -> None:
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    execution = None if strategy is None else poptorch.PipelinedExecution(*strategy)
    with pytest.raises(ValueError, match=match) as info:
        _train(_Refused(case), execution, 1, 4, 8)
    assert "\n" not in str(info.value)


def test_annotations_poptorch_refuses_are_refused_in_one_line() -> None:
    """A module that already begins a block, a function instead of a module, an IPU that is
    none, and a block id that is not a string."""
    with pytest.raises(ValueError, match=r"pass a torch.nn.Module .*with poptorch.Block") as info:
        poptorch.BeginBlock(torch.relu, "A")  # type: ignore[type-var]
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"block 'A': ipu_id=-1 is not an IPU index") as info:
        poptorch.BeginBlock(torch.nn.Linear(2, 2), "A", ipu_id=-1)
    assert "\n" not in str(info.value)
    layer = poptorch.BeginBlock(torch.nn.Linear(2, 2), "A", ipu_id=0)
    with pytest.raises(ValueError, match=r"already begins block 'A' \(ipu_id 0\)") as info:
        poptorch.BeginBlock(layer, "B", ipu_id=1)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"block ids are strings .*Stage\('0'\)") as info:
        poptorch.Stage(0)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_blocks_change_nothing_outside_a_training_trace() -> None:
    """Eager PyTorch and inference run the annotated forward unchanged."""
    model = _AutoIds()
    x, y = torch.ones(2, 4), torch.zeros(2, dtype=torch.long)
    out, _ = model(x, y)
    inferred, _ = poptorch.inferenceModel(model)(x, y)
    np.testing.assert_allclose(inferred.numpy(), out.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_begin_block_takes_its_layer_by_poptorchs_keyword() -> None:
    """Graphcore's CNNs call ``BeginBlock(ipu_id=..., layer_to_call=layer)``."""
    layer = torch.nn.Linear(4, 4)
    assert poptorch.BeginBlock(ipu_id=1, layer_to_call=layer, user_id="B") is layer
    with pytest.raises(ValueError, match="already begins block 'B'"):
        poptorch.BeginBlock(layer_to_call=layer, ipu_id=1)


class _SplitLater(torch.nn.Module):
    """Graphcore's CNNs annotate only their pipeline splits: ``BeginBlock(layer,
    ipu_id=1)`` on a later layer; the stem before it has no block."""

    inputs = 4

    def __init__(self, annotate: bool) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.stem = torch.nn.Linear(4, 8)
        self.later = torch.nn.Linear(8, 3)
        if annotate:
            poptorch.BeginBlock(self.later, ipu_id=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.later(torch.relu(self.stem(x)))
        return out, F.cross_entropy(out, y)


def test_the_layers_before_the_first_begin_block_run_on_ipu_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PopTorch: "the layers before the first BeginBlock will be placed on IPU 0". They
    were put in the first block, on IPU 1, which left IPU 0 without a stage and refused
    EfficientNet-B4's configuration (its one split, ``blocks/3/0/bn2``, on IPU 1)."""
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    losses, training = _train(_SplitLater(annotate=True), None, 3, 4, 8)
    pipeline = training._trainer.pipeline
    assert pipeline.ipus == (0, 1)
    assert pipeline.stages[0].blocks == ("(before the first block)",)
    want, _ = _eager(_SplitLater(annotate=False), 3, 4, 8)
    np.testing.assert_allclose(losses, want, rtol=1e-5, atol=1e-6)
