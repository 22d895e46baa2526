"""The traced torch program cut into blocks by name scope composes back to the whole loss."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
torchax = pytest.importorskip("torchax", reason="torchax is not installed")
jax = pytest.importorskip("jax")

import popdist_emu.poptorch as poptorch  # noqa: E402
from popdist_emu.poptorch._split import block_scopes, split_blocks  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(3, 4)
        self.b = torch.nn.Linear(4, 4)
        self.c = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.a(x))
        out = self.c(torch.relu(self.b(h)) + h)  # h skips block B2: carried through it
        return out, torch.nn.functional.cross_entropy(out, y)


def test_blocks_compose_to_the_whole_loss_and_gradient() -> None:
    torch.manual_seed(0)
    net = _Net()
    weights, fn = torchax.extract_jax(net)
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)
    y = np.arange(5, dtype=np.int32) % 2
    x, y = jax.numpy.asarray(x), jax.numpy.asarray(y)
    with block_scopes() as begin:
        for module, name in ((net.a, "B1"), (net.b, "B2"), (net.c, "B3")):
            module.register_forward_pre_hook(lambda *_, n=name: begin(n))

        def loss(w, batch):
            return fn(w, batch)[-1]

        model = split_blocks(loss, weights, (x, y), ["B1", "B2", "B3"])
    assert [b.name for b in model.blocks] == ["B1", "B2", "B3"]
    assert model.blocks[1].params == ("b.bias", "b.weight")
    whole = float(loss(weights, (x, y)))
    assert abs(float(model(weights, (x, y))) - whole) < 1e-6
    g_whole = jax.grad(loss)(weights, (x, y))
    g_split = jax.grad(model)(weights, (x, y))
    for name in weights:
        np.testing.assert_allclose(g_split[name], g_whole[name], atol=1e-6)


class _TiedLm(torch.nn.Module):
    """A tiny language model whose decoder is tied to its embedding, placed as Graphcore's
    MLPerf BERT places its masked-LM head: embedding and decoder on IPU 0, the decoder the
    pipeline's last stage (the pipeline wraps round)."""

    def __init__(self, wrap: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = torch.nn.Embedding(11, 6)
        self.layer = torch.nn.Linear(6, 6)
        self.decoder = torch.nn.Linear(6, 11, bias=False)
        self.decoder.weight = self.embedding.weight
        if wrap:
            poptorch.BeginBlock(self.embedding, "embedding", ipu_id=0)
            poptorch.BeginBlock(self.layer, "layer", ipu_id=1)
            poptorch.BeginBlock(self.decoder, "decoder", ipu_id=0)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> tuple:
        hidden = torch.tanh(self.layer(self.embedding(tokens).sum(1)))
        logits = self.decoder(hidden)
        return logits, torch.nn.functional.cross_entropy(logits, labels)


@pytest.mark.parametrize("auto", [None, "AutoIncrement"])
def test_a_tied_decoder_wrapped_round_to_ipu_0_trains_as_pytorch(
    monkeypatch: pytest.MonkeyPatch, auto: str | None
) -> None:
    """Three stages on two IPUs, PopTorch's default strategy (pipelined) or
    ``PipelinedExecution(AutoStage.AutoIncrement)`` (a stage per block, as Graphcore's BERT
    and ViT applications set it), the tied weight read by the first and last stage: the
    steps follow PyTorch eager's."""
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    emulated, reference = _TiedLm(wrap=True), _TiedLm(wrap=False)
    opts = poptorch.Options()
    if auto is not None:
        opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage[auto]))
    opts.Training.gradientAccumulation(5)  # at least 2 x 3 stages - 1
    optimizer = torch.optim.SGD(emulated.parameters(), lr=0.5)
    training = poptorch.trainingModel(emulated, opts, optimizer)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    generator = torch.Generator().manual_seed(2)
    for _ in range(3):
        tokens = torch.randint(0, 11, (10, 3), generator=generator)
        labels = torch.randint(0, 11, (10,), generator=generator)
        _, loss = training(tokens, labels)
        reference_optimizer.zero_grad()
        losses = [  # 5 micro-batches of 2 samples
            reference(tokens[i : i + 2], labels[i : i + 2])[1] for i in range(0, 10, 2)
        ]
        (sum(losses) / 5).backward()
        reference_optimizer.step()
        # PopTorch's loss (OutputMode Default = Final): the last micro-batch's.
        assert abs(float(loss) - float(losses[-1].detach())) < 1e-5
    pipeline = training._trainer.pipeline
    assert pipeline.ipus == (0, 1, 0) and pipeline.strategy.strategy == "pipelined"
    assert emulated.decoder.weight is emulated.embedding.weight
    np.testing.assert_allclose(
        emulated.embedding.weight.detach().numpy(),
        reference.embedding.weight.detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize(
    ("wrap", "auto", "match"),
    [
        (True, "SameAsIpu", "block 'decoder' returns to IPU 0 after block 'layer' on IPU 1"),
        (False, "AutoIncrement", "has no ipu_id; AutoStage places each block by its ipu_id"),
    ],
)
def test_auto_stages_a_model_cannot_have_are_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, wrap: bool, auto: str, match: str
) -> None:
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    model = _TiedLm(wrap=wrap)
    if not wrap:
        poptorch.BeginBlock(model.layer, "layer")  # a block without its IPU
    opts = poptorch.Options()
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage[auto]))
    opts.Training.gradientAccumulation(5)
    training = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.5))
    tokens, labels = torch.zeros(10, 3, dtype=torch.long), torch.zeros(10, dtype=torch.long)
    with pytest.raises(ValueError, match=match) as info:
        training(tokens, labels)
    assert "\n" not in str(info.value)
