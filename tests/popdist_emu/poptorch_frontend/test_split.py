"""The traced torch program cut into blocks by name scope composes back to the whole loss."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
torchax = pytest.importorskip("torchax", reason="torchax is not installed")
jax = pytest.importorskip("jax")

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
