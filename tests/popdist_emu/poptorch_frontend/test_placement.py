"""What a PopTorch program's placement decides: its pipeline's recomputation.

PopTorch turns PopART's ``autoRecomputation`` to ``Pipeline`` for a pipelined model over more
than one IPU unless the program set it, so Graphcore's BERT recomputes without asking; its
stages stash only their inputs (``hardware.stash_entry_bytes``). Before, the emulator left
every PopTorch pipeline without recomputation, and BERT's IPU 0 (embeddings and heads)
stashed each stage's whole forward for up to 13 micro-batches: out of memory.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed")

import hardware  # noqa: E402
import popdist_emu  # noqa: E402
import popdist_emu.poptorch as poptorch  # noqa: E402
from popdist_emu import sim  # noqa: E402
from popdist_emu.poptorch._placement import recomputation  # noqa: E402


class _Wide(torch.nn.Module):
    """Block ``A`` on IPU 0 (a small input widened: its forward saves far more than its
    input), block ``B`` on IPU 1 with the loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = poptorch.BeginBlock(torch.nn.Linear(4, 256), "A", ipu_id=0)
        self.b = poptorch.BeginBlock(torch.nn.Linear(256, 3), "B", ipu_id=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.b(torch.tanh(torch.relu(self.a(x))))
        return out, torch.nn.functional.cross_entropy(out, y)


def _trained(monkeypatch: pytest.MonkeyPatch, strategy: Any = None, auto: int | None = None):
    """One call of ``trainingModel`` over 2 IPUs (accumulation 4, micro-batch 2): its Trainer
    and the batch it stepped on."""
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(4)
    if strategy is not None:
        opts.setExecutionStrategy(strategy)
    if auto is not None:
        opts._Popart.set("autoRecomputation", auto)
    model = _Wide()
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    training(x, y)
    return training._trainer, (x.numpy().reshape(1, 4, 1, 2, 4), y.numpy().reshape(1, 4, 1, 2))


def test_a_pipelined_model_recomputes_by_default_and_stashes_only_stage_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trainer, batch = _trained(monkeypatch)
    assert trainer.pipeline.recomputation and trainer.options.recomputation
    simulation = sim.simulate(trainer, batch)
    stages, n = simulation.model.stages, len(simulation.model.stages)
    a = stages[0]
    assert a.activation_bytes > 10 * a.input_bytes  # the wide forward, not stashed
    # IPU 0's activations: 2n+1 micro-batches' inputs of stage A, and one recomputation.
    depth = hardware.stash_depth(0, n, "pipelined")
    working = a.checkpoint_bytes or a.activation_bytes
    assert simulation.replica.ipu_memory[0].categories["activations"] == (
        depth * a.input_bytes + working
    )


@pytest.mark.parametrize(
    ("auto", "recomputing"), [(0, False), (1, False), (2, False), (3, True), (4, True)]
)
def test_the_programs_own_auto_recomputation_rules(auto: int, recomputing: bool) -> None:
    """PopART's None, Standard, NormOnly stash the forward (Standard and NormOnly counted
    whole); Pipeline and RecomputeAll only the stage inputs; on any strategy."""
    fields = popdist_emu.Options(replication_factor=1)
    for strategy, ipus in (("pipelined", 2), ("sharded", 2), ("pipelined", 1)):
        assert recomputation(fields, strategy, ipus, auto) is recomputing


def test_poptorchs_default_recomputes_only_a_pipeline_over_several_ipus() -> None:
    fields = popdist_emu.Options(replication_factor=1)
    assert recomputation(fields, "pipelined", 2, None)
    assert not recomputation(fields, "pipelined", 1, None)
    assert not recomputation(fields, "sharded", 4, None)
    assert recomputation(popdist_emu.Options(recomputation=True), "sharded", 4, None)


def test_the_programs_setting_reaches_its_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    trainer, _ = _trained(monkeypatch, auto=0)
    assert not trainer.pipeline.recomputation
    strategy = poptorch.ShardedExecution(poptorch.Stage("A"), poptorch.Stage("B"))
    trainer, _ = _trained(monkeypatch, strategy)
    assert not trainer.pipeline.recomputation


def test_an_unknown_recomputation_type_is_refused_and_other_keys_have_no_effect() -> None:
    opts = poptorch.Options()
    with pytest.raises(ValueError, match=r"'autoRecomputation', 7\): pass a PopART Recomputa"):
        opts._Popart.set("autoRecomputation", 7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert opts._Popart.set("disableGradAccumulationTensorStreams", True) is opts
    assert opts.auto_recomputation is None
    assert any("only autoRecomputation is read" in str(w.message) for w in caught)


class _Checkpointed(torch.nn.Module):
    """Stage ``A`` on IPU 0 of four wide layers with a ``recomputationCheckpoint`` after the
    second (``checkpoint``), or none; stage ``B`` on IPU 1 with the loss."""

    def __init__(self, checkpoint: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.checkpoint = checkpoint
        self.a = poptorch.BeginBlock(torch.nn.Linear(4, 256), "A", ipu_id=0)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(256, 256) for _ in range(3)])
        self.b = poptorch.BeginBlock(torch.nn.Linear(256, 3), "B", ipu_id=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.a(x))
        for k, layer in enumerate(self.layers):
            h = torch.tanh(layer(h))
            if self.checkpoint and k == 0:
                h = poptorch.recomputationCheckpoint(h)
        out = self.b(h)
        return out, torch.nn.functional.cross_entropy(out, y)


def _stage_a(
    monkeypatch: pytest.MonkeyPatch, checkpoint: bool, strategy: Any = None
) -> tuple[hardware.StageProfile, list[float]]:
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(4)
    if strategy is not None:
        opts.setExecutionStrategy(strategy)
    model = _Checkpointed(checkpoint)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    generator = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 4, generator=generator), torch.randint(0, 3, (8,), generator=generator)
    losses = [float(training(x, y)[1]) for _ in range(2)]
    batch = (x.numpy().reshape(1, 4, 1, 2, 4), y.numpy().reshape(1, 4, 1, 2))
    return sim.simulate(training._trainer, batch).model.stages[0], losses


def test_a_recomputing_stage_stashes_its_checkpoints_and_recomputes_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PopART stashes a pipeline stage's ``recomputationCheckpoint`` tensors beside its
    input and recomputes one segment between them at a time; the stage was charged its
    whole forward while its backward ran (EfficientNet-B4's offline row, refused)."""
    marked, losses = _stage_a(monkeypatch, checkpoint=True)
    plain, plain_losses = _stage_a(monkeypatch, checkpoint=False)
    assert losses == plain_losses  # a checkpoint changes no number
    activation = 2 * 256 * 4  # one micro-batch's layer output, float32
    assert plain.stashed_checkpoint_bytes == 0
    assert marked.stashed_checkpoint_bytes == activation
    assert marked.activation_bytes == plain.activation_bytes  # the whole forward, as before
    assert plain.checkpoint_bytes == plain.activation_bytes
    assert 0 < marked.checkpoint_bytes < plain.checkpoint_bytes  # one segment's, not all


def test_a_stage_that_does_not_recompute_counts_no_checkpoint_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sharded execution stashes the forward (no recomputation): the named checkpoint is
    taken out of the trace, so its tensor is not saved twice."""
    sharded = poptorch.ShardedExecution(poptorch.Stage("A"), poptorch.Stage("B"))
    marked, _ = _stage_a(monkeypatch, checkpoint=True, strategy=sharded)
    plain, _ = _stage_a(monkeypatch, checkpoint=False, strategy=sharded)
    assert marked.activation_bytes == plain.activation_bytes
    assert marked.stashed_checkpoint_bytes == 0
