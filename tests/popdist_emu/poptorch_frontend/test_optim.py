"""``poptorch.optim`` mapped onto optax makes PyTorch's own update (torch and torchax needed)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")
jax = pytest.importorskip("jax")
optim = pytest.importorskip("popdist_emu.poptorch.optim")


def _run_both(make: object, steps: int = 5) -> float:
    """Largest difference between torch's parameters and optax's after ``steps`` updates."""
    torch.manual_seed(0)
    weights = torch.nn.Parameter(torch.randn(4, 3))
    optimizer = make([weights])  # type: ignore[operator]
    transform = optim.to_optax(optimizer)
    params = {"w": jax.numpy.asarray(weights.detach().numpy())}
    state = transform.init(params)
    for step in range(steps):
        grad = torch.sin(torch.arange(12.0).reshape(4, 3) + step)
        weights.grad = grad.clone()
        optimizer.step()
        updates, state = transform.update({"w": grad.numpy()}, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
    return float(np.abs(np.asarray(params["w"]) - weights.detach().numpy()).max())


@pytest.mark.parametrize(
    "make",
    [
        lambda p: optim.SGD(p, lr=0.1),
        lambda p: optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, loss_scaling=128.0),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
        lambda p: optim.Adam(p, lr=0.01, weight_decay=0.1),
        lambda p: optim.AdamW(p, lr=0.01),
        lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6),
    ],
)
def test_update_matches_pytorch(make: object) -> None:
    assert _run_both(make) < 1e-6


def test_poptorch_adamw_default_weight_decay_is_torchs() -> None:
    optimizer = optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    assert optimizer.param_groups[0]["weight_decay"] == 0.01


def test_unsupported_settings_refused_in_one_line() -> None:
    param = torch.nn.Parameter(torch.zeros(1))
    with pytest.raises(ValueError, match="parameter groups"):
        optim.to_optax(torch.optim.SGD([{"params": [param]}, {"params": []}], lr=0.1))
    with pytest.raises(ValueError, match="maps SGD, Adam and AdamW"):
        optim.to_optax(torch.optim.RMSprop([param]))
