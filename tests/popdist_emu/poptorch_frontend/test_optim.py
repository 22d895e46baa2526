"""``poptorch.optim`` mapped onto optax makes PyTorch's own update (torch and torchax needed)."""

from __future__ import annotations

import numpy as np
import pytest
from deadlines import within

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
        lambda p: optim.RMSprop(p, lr=0.01, loss_scaling=64.0),
        lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, eps=1e-3, weight_decay=0.1),
        lambda p: optim.RMSprop(p, lr=0.01, momentum=0.9, centered=True),
    ],
)
def test_update_matches_pytorch(make: object) -> None:
    assert _run_both(make) < 1e-6


def test_poptorch_adamw_default_weight_decay_is_torchs() -> None:
    optimizer = optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    assert optimizer.param_groups[0]["weight_decay"] == 0.01


@pytest.mark.parametrize("cls", [torch.optim.SGD, torch.optim.AdamW, optim.Adam])
def test_parameter_groups_update_as_pytorch_does(cls: type) -> None:
    """Per-parameter options (the common "no weight decay on biases", another learning
    rate), and a weight in no group left alone, as torch.optim does."""
    torch.manual_seed(0)
    weights = {k: torch.nn.Parameter(torch.randn(3, 2)) for k in ("w", "b", "frozen")}
    extra = {"momentum": 0.9} if cls is torch.optim.SGD else {}
    optimizer = cls(
        [
            {"params": [weights["w"]], "weight_decay": 0.1},
            {"params": [weights["b"]], "weight_decay": 0.0, "lr": 0.05},
        ],
        lr=0.01,
        **extra,
    )
    transform = optim.to_optax(optimizer, weights)
    params = {k: jax.numpy.asarray(v.detach().numpy()) for k, v in weights.items()}
    state = transform.init(params)
    for step in range(5):
        grads = {k: torch.cos(torch.arange(6.0).reshape(3, 2) * (i + 1) + step)
                 for i, k in enumerate(weights)}  # fmt: skip
        for k, v in weights.items():
            v.grad = grads[k].clone()
        optimizer.step()
        updates, state = transform.update({k: g.numpy() for k, g in grads.items()}, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
    for k, v in weights.items():
        # float32 rounding of a few steps; a wrong group setting moves the weights by 1e-3
        assert float(np.abs(np.asarray(params[k]) - v.detach().numpy()).max()) < 5e-6, k


def test_unsupported_settings_refused_in_one_line() -> None:
    param = torch.nn.Parameter(torch.zeros(1))
    with pytest.raises(ValueError, match="names are needed"):
        optim.to_optax(torch.optim.SGD([{"params": [param]}, {"params": []}], lr=0.1))
    with pytest.raises(ValueError, match="maps SGD, Adam, AdamW, RMSprop"):
        optim.to_optax(torch.optim.Adagrad([param]))


def test_poptorch_rmsprop_defaults_are_torchs() -> None:
    group = optim.RMSprop([torch.nn.Parameter(torch.zeros(1))]).param_groups[0]
    assert (group["lr"], group["alpha"], group["eps"], group["momentum"]) == (1e-2, 0.99, 1e-8, 0)


def _lamb_reference(
    w: np.ndarray,
    grads: list[np.ndarray],
    lr: float,
    wd: float,
    bias_correction: bool = True,
    max_weight_norm: float = np.inf,
) -> np.ndarray:
    """You et al. 2020, Algorithm 2 (LAMB), with or without Adam's bias correction, the
    weight's norm clipped by PopTorch's phi(z) = min(z, max_weight_norm), in float64."""
    b1, b2, eps = 0.9, 0.999, 1e-8
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        c1, c2 = (1 - b1**t, 1 - b2**t) if bias_correction else (1.0, 1.0)
        u = (m / c1) / (np.sqrt(v / c2) + eps) + wd * w
        w_norm, u_norm = min(np.linalg.norm(w), max_weight_norm), np.linalg.norm(u)
        ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        w = w - lr * ratio * u
    return w


@pytest.mark.parametrize(
    ("bias_correction", "max_weight_norm"), [(True, None), (False, None), (True, 1.5)]
)
def test_lamb_makes_the_papers_update(bias_correction: bool, max_weight_norm: float | None) -> None:
    """With PopTorch's ``bias_correction=False`` too (Graphcore's BERT
    ``LAMBNoBiasCorrection``, GPT-2 and CLIP): the moments are used as they are; and with
    ``max_weight_norm`` (FastPitch) below the weight's norm (about 3.5): it is clipped."""
    torch.manual_seed(0)
    start = torch.randn(4, 3)
    optimizer = optim.LAMB(
        [torch.nn.Parameter(start.clone())],
        lr=0.01,
        weight_decay=0.1,
        bias_correction=bias_correction,
        max_weight_norm=max_weight_norm,
    )
    transform = optim.to_optax(optimizer)
    params = {"w": jax.numpy.asarray(start.numpy())}
    state = transform.init(params)
    grads = [np.sin(np.arange(12.0).reshape(4, 3) + step) for step in range(5)]
    for grad in grads:
        updates, state = transform.update({"w": grad.astype(np.float32)}, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
    clip = np.inf if max_weight_norm is None else max_weight_norm
    w64 = start.numpy().astype(np.float64)
    expected = _lamb_reference(w64, grads, 0.01, 0.1, bias_correction, clip)
    assert float(np.abs(np.asarray(params["w"]) - expected).max()) < 1e-6
    if max_weight_norm is not None:  # the clip matters: unclipped is far off
        unclipped = _lamb_reference(w64, grads, 0.01, 0.1, bias_correction)
        assert float(np.abs(unclipped - expected).max()) > 1e-3


def test_lamb_defaults_and_refusals_are_poptorchs() -> None:
    param = torch.nn.Parameter(torch.zeros(1))
    group = optim.LAMB([param], loss_scaling=64.0).param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (
        1e-3,
        (0.9, 0.999),
        1e-8,
        1e-2,
    )
    # BERT and ViT set it per parameter group (None): one value for all is one clip.
    other = torch.nn.Parameter(torch.zeros(1))
    same = optim.LAMB([{"params": [param], "max_weight_norm": None}, {"params": [other]}])
    assert optim.to_optax(same, {"a": param, "b": other}).max_weight_norm is None


def test_lamb_clips_each_groups_weights_by_its_own_max_weight_norm() -> None:
    """Graphcore's BERT gives its biases' group ``max_weight_norm=0`` (a trust ratio of 1:
    Adam's step) and leaves the others unclipped; a third group clips at 1.5: each weight
    moves as LAMB with its own group's clip, whatever the order of the names."""
    torch.manual_seed(0)
    starts = {name: torch.randn(4, 3) for name in ("c_bias", "a_dense", "b_clipped")}
    weights = {name: torch.nn.Parameter(start.clone()) for name, start in starts.items()}
    clips = {"c_bias": 0.0, "a_dense": None, "b_clipped": 1.5}
    optimizer = optim.LAMB(
        [{"params": [weights[n]], "max_weight_norm": clip} for n, clip in clips.items()],
        lr=0.01,
        weight_decay=0.1,
    )
    transform = optim.to_optax(optimizer, weights)
    params = {n: jax.numpy.asarray(s.numpy()) for n, s in starts.items()}
    state = transform.init(params)
    grads = [np.sin(np.arange(12.0).reshape(4, 3) + step) for step in range(5)]
    for grad in grads:
        update = {n: grad.astype(np.float32) for n in params}
        updates, state = transform.update(update, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
    for name, clip in clips.items():
        w64 = starts[name].numpy().astype(np.float64)
        bound = np.inf if clip is None else clip
        expected = _lamb_reference(w64, grads, 0.01, 0.1, max_weight_norm=bound)
        assert float(np.abs(np.asarray(params[name]) - expected).max()) < 1e-6, name


def test_from_poptorch_optim_imports_every_optimiser_without_the_sdk() -> None:
    """``from poptorch.optim import LAMB, RMSprop`` (Graphcore's BERT and CNN applications)
    through the fallback package, as outside ``poprun-emu``."""
    import subprocess
    import sys

    code = (
        "import sys; sys.meta_path.append(__import__('launch._popdist_finder', "
        "fromlist=['x']).PopDistFallbackFinder)\n"
        "from poptorch.optim import LAMB, SGD, Adam, AdamW, RMSprop\n"
        "import popdist_emu.poptorch.optim as o\n"
        "print(all(x is getattr(o, x.__name__) for x in (LAMB, SGD, Adam, AdamW, RMSprop)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=within(300),
        check=False,
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]


def test_a_half_precision_model_keeps_adams_moments_in_float32() -> None:
    """Gradients of 1e-4 square below float16's smallest number: moments kept in float16
    would make Adam's step ``m / eps`` (a jump of 100 per weight); PopTorch keeps them in
    float32, so the half model follows a float32 one within float16's rounding."""
    import torch

    import popdist_emu.poptorch as poptorch

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Linear(4, 1)

    class Loss(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x).float().sum() * 1e-4  # gradients of about 1e-4

    half, reference = make().half(), make()
    optimizer = torch.optim.AdamW(half.parameters(), lr=0.01, eps=1e-6, weight_decay=0.0)
    training = poptorch.trainingModel(Loss(half), poptorch.Options(), optimizer)
    torch_opt = torch.optim.AdamW(reference.parameters(), lr=0.01, eps=1e-6, weight_decay=0.0)
    x = torch.ones(2, 4)
    for _ in range(3):
        training(x.half())
        torch_opt.zero_grad()
        Loss(reference)(x).backward()
        torch_opt.step()
    np.testing.assert_allclose(
        half.weight.detach().float().numpy(), reference.weight.detach().numpy(), atol=2e-3
    )


def test_arguments_passed_as_none_take_poptorchs_defaults() -> None:
    """PopTorch treats None as "not set" (ViT passes ``eps=None``, ``betas=None`` and an
    unset ``bias_correction``): the defaults, never None, reach the update."""
    weight = torch.nn.Parameter(torch.ones(2))
    adam = optim.Adam([weight], lr=0.1, betas=None, eps=None, weight_decay=None)
    group = adam.param_groups[0]
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.9, 0.999), 1e-8, 0)
    sgd = optim.SGD([weight], lr=0.1, momentum=None, loss_scaling=None)
    assert sgd.param_groups[0]["momentum"] == 0
    lamb = optim.LAMB([weight], lr=None, betas=None, bias_correction=None)
    group = lamb.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["bias_correction"]) == (
        1e-3,
        (0.9, 0.999),
        1e-8,
        True,
    )
    assert optim.LAMB([weight], bias_correction=False).defaults["bias_correction"] is False


def test_rmsprop_tf_variant_follows_tensorflows_rule() -> None:
    """PopTorch's ``use_tf_variant`` (Graphcore's EfficientNet): squared-gradient average
    starting at one, eps inside the root, the learning rate inside the momentum buffer;
    checked against that rule in NumPy over steps whose learning rate changes."""
    lr, alpha, eps, momentum, wd = 0.1, 0.9, 1e-3, 0.8, 0.01
    param = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = optim.RMSprop(
        [param],
        lr=lr,
        alpha=alpha,
        eps=eps,
        momentum=momentum,
        weight_decay=wd,
        use_tf_variant=True,
    )
    transform = optim.to_optax(opt)
    params = {"w": jax.numpy.asarray([1.0, -2.0])}
    state = transform.init(params)
    w, v, buf = np.array([1.0, -2.0]), np.ones(2), np.zeros(2)
    for step, g in enumerate(([0.5, -1.0], [0.2, 0.3], [-0.4, 0.1])):
        rate = lr / (step + 1)
        state.hyperparams["learning_rate"] = jax.numpy.asarray(rate)
        grad = np.array(g) + wd * w
        v = alpha * v + (1 - alpha) * grad**2
        buf = momentum * buf + rate * grad / np.sqrt(v + eps)
        w = w - buf
        updates, state = transform.update({"w": jax.numpy.asarray(g)}, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
        np.testing.assert_allclose(np.asarray(params["w"]), w, rtol=1e-5)
