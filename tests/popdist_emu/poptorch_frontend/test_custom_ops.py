"""``poptorch.custom_op`` runs a registered PyTorch reference by the operator's name, domain
and version: GPT-2's ``RemapCE`` (shipped) and one registered here, inside a model that
``poptorch.trainingModel`` trains (traced through torchax), against PyTorch eager; an
operator without a reference, bad attributes and outputs unlike ``example_outputs`` are
refused in one line.

Needs torch and torchax (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
pytest.importorskip("torchax", reason="torchax is not installed (pip install -e .[poptorch])")

import popdist_emu.poptorch as poptorch  # noqa: E402

F = torch.nn.functional
STEPS, BATCH = 4, 6


def _leaky_relu(x: torch.Tensor, *, alpha: float) -> torch.Tensor:
    return torch.where(x >= 0, x, alpha * x)


poptorch.register_custom_op("LeakyRelu", "custom.ops", 1, _leaky_relu)


class _Net(torch.nn.Module):
    """Two dense layers; with ``custom`` the hidden activation is the registered LeakyRelu and
    the logits pass through GPT-2's RemapCE, as its ``train_gpt2.py`` remaps them."""

    def __init__(self, custom: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.custom = torch.nn.Linear(5, 8), torch.nn.Linear(8, 3), custom

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.a(x)
        if self.custom:
            h = poptorch.custom_op([h], "LeakyRelu", "custom.ops", 1, [h], {"alpha": 0.1})[0]
        else:
            h = F.leaky_relu(h, 0.1)
        logits = self.b(h)
        if self.custom:
            remapped = poptorch.custom_op(
                [logits],
                "RemapCE",
                "ai.graphcore",
                1,
                example_outputs=[logits],
                attributes={"grain_size": 8},
            )
            logits = remapped[0]
        return logits, F.cross_entropy(logits, y)


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(3)
    return [
        (
            torch.randn(BATCH, 5, generator=generator),
            torch.randint(0, 3, (BATCH,), generator=generator),
        )
        for _ in range(STEPS)
    ]


def test_custom_ops_train_inside_a_training_model_as_pytorch_eager() -> None:
    """The emulator's run of the model with both custom ops (traced through torchax, their
    gradients from JAX's autograd) against eager PyTorch with ``F.leaky_relu`` and no remap."""
    model = _Net(custom=True)
    training = poptorch.trainingModel(
        model, poptorch.Options(), torch.optim.SGD(model.parameters(), lr=0.5)
    )
    losses = [float(training(x, y)[1]) for x, y in _batches()]
    training.copyWeightsToHost()
    eager = _Net(custom=False)
    optimizer = torch.optim.SGD(eager.parameters(), lr=0.5)
    want = []
    for x, y in _batches():
        optimizer.zero_grad()
        loss = eager(x, y)[1]
        loss.backward()
        optimizer.step()
        want.append(float(loss.detach()))
    np.testing.assert_allclose(losses, want, rtol=1e-5, atol=1e-6)
    assert losses[-1] < losses[0]
    for (name, got), ref in zip(
        model.state_dict().items(), eager.state_dict().values(), strict=True
    ):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_remap_ce_is_an_identity_on_values_and_gradients_in_eager_pytorch() -> None:
    x = torch.randn(2, 3, dtype=torch.float16, requires_grad=True)
    (out,) = poptorch.custom_op(
        [x], "RemapCE", "ai.graphcore", 1, [x], attributes={"grain_size": 8}
    )
    assert out.dtype == torch.float16 and torch.equal(out, x) and out is not x
    (out * 3).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 3))


@pytest.mark.parametrize(
    ("args", "attributes", "error", "message"),
    [
        (
            ("Nms", "ai.graphcore", 1),
            None,
            NotImplementedError,
            "poptorch.register_custom_op('Nms', 'ai.graphcore', 1, fn)",
        ),
        (
            ("RemapCE", "ai.graphcore", 2),
            {"grain_size": 8},
            NotImplementedError,
            "no reference implementation is registered",
        ),
        (
            ("RemapCE", "ai.graphcore", 1),
            {"grain_size": [1, 2.0]},
            ValueError,
            "attribute grain_size=[1, 2.0] must be",
        ),
        (("RemapCE", "ai.graphcore", 1), {3: 1}, ValueError, "attribute key 3 is not a string"),
        (
            ("RemapCE", "ai.graphcore", 1),
            {"grain_size": 8, "debug_str": "é"},
            ValueError,
            "non-ASCII",
        ),
        (("LeakyRelu", "custom.ops", 1), {"alpha": 0.1, "as": "x"}, TypeError, "as"),
    ],
)
def test_bad_calls_are_refused_in_one_line(args, attributes, error, message: str) -> None:
    x = torch.ones(2)
    with pytest.raises(error) as info:
        poptorch.custom_op([x], *args, [x], attributes=attributes)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_outputs_unlike_the_examples_and_bad_registrations_are_refused() -> None:
    x = torch.ones(2)
    with pytest.raises(
        ValueError, match=r"outputs of \(shape, dtype\) \[\(\(2,\), torch.float32\)\]"
    ):
        poptorch.custom_op([x], "RemapCE", "ai.graphcore", 1, [x, x], {"grain_size": 1})
    with pytest.raises(ValueError, match="`inputs` must be a list or tuple of tensors"):
        poptorch.custom_op(x, "RemapCE", "ai.graphcore", 1, [x], {"grain_size": 1})
    with pytest.raises(ValueError, match="is not callable"):
        poptorch.register_custom_op("Op", "custom.ops", 1, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pass an int"):
        poptorch.register_custom_op("Op", "custom.ops", "1", _leaky_relu)  # type: ignore[arg-type]
