"""``poptorch.optim``: PopTorch's optimisers, and their mapping onto optax for the emulator.

PopTorch's ``SGD``, ``Adam``, ``AdamW`` and ``RMSprop`` are ``torch.optim`` optimisers with
extra IPU arguments (``loss_scaling``, ``velocity_scaling``, ``accum_type``, ...). Here they are the
``torch.optim`` classes with those arguments accepted: loss and velocity scaling cancel out
mathematically (in float32 they only move the last bits), and the accumulator types are
float32 in the emulator; all are ``poptorch.optim.Optimizer``s (``_optimizer_base``:
``variable_attrs``). :func:`to_optax` turns any of them, or the plain ``torch.optim``
ones, into the optax transformation that makes the same update:

- SGD: ``buf = momentum * buf + (g + wd * p)``; ``p -= lr * buf`` (Nesterov:
  ``p -= lr * (g' + momentum * buf)``);
- Adam: L2 weight decay added to the gradient, then Adam with bias correction;
- AdamW: decoupled weight decay ``p -= lr * wd * p`` beside the Adam step;
- RMSprop: L2 weight decay, ``v = alpha * v + (1 - alpha) * g^2`` (centred: minus the
  square of the gradient's average), ``g / (sqrt(v) + eps)`` (``optax.scale_by_rms`` or
  ``scale_by_stddev`` with ``eps_in_sqrt=False``: eps outside the root, as PyTorch puts
  it), then momentum as SGD's and the learning rate;
- LAMB (PopTorch's own, no ``torch.optim`` peer): ``optax.lamb``'s update (see
  :class:`LAMB`), built as ``popdist_emu.runtime.layerwise`` so replicated tensor sharding
  can shard it (its per-tensor norms are reduced over the sharding domain).

The learning rate is an injected hyper-parameter (``optax.inject_hyperparams``), so
``model.setOptimizer`` can change it between steps without losing the optimiser state, as
PopTorch does.

References:
    PopTorch User Guide, "Optimizers" (``poptorch.optim.SGD``, ``Adam``, ``AdamW``,
    ``RMSprop``: defaults, ``loss_scaling``, ``velocity_scaling``, ``use_tf_variant``);
    PyTorch documentation, ``torch.optim.SGD``, ``Adam``, ``AdamW``, ``RMSprop`` (the update
    rules above); optax documentation, ``optax.sgd``, ``optax.adam``, ``optax.adamw``,
    ``optax.scale_by_rms``, ``optax.scale_by_stddev``, ``optax.inject_hyperparams``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import jax
import optax
import torch

from popdist_emu.poptorch._optimizer_base import Optimizer
from popdist_emu.runtime import ClipByName, Optimiser, layerwise

if TYPE_CHECKING:
    from torch.optim.optimizer import ParamsT

__all__ = [
    "LAMB",
    "SGD",
    "Adam",
    "AdamW",
    "Optimizer",
    "RMSprop",
    "optimiser_hyperparams",
    "to_optax",
]

# PopTorch-only arguments that change no number of the emulator's float32 update.
_IPU_ARGUMENTS = (
    "loss_scaling",
    "velocity_scaling",
    "use_combined_accum",
    "accum_type",
    "first_order_momentum_accum_type",
    "second_order_momentum_accum_type",
    "max_grad_norm",
)

# Scalings the program set to other than 1, named once each: PopTorch applies them on the
# IPU (against float16 underflow); the emulator computes without them.
_SCALINGS = ("loss_scaling", "velocity_scaling")
_WARNED: set[str] = set()


def _pop_ipu_arguments(kwargs: dict[str, object], name: str) -> None:
    """Drops PopTorch's IPU-only arguments and each None (unset: torch's default)."""
    for key in [k for k, v in kwargs.items() if v is None]:
        del kwargs[key]
    for key in _IPU_ARGUMENTS:
        value = kwargs.pop(key, None)
        if key in _SCALINGS and value not in (None, 1, 1.0) and key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(
                f"poptorch.optim.{name}({key}={value!r}): no effect in popdist-emu; PopTorch "
                f"scales on the IPU and divides the scale out again, so the update is the "
                f"same up to rounding, and the emulator computes it unscaled",
                stacklevel=3,
            )
        if key == "max_grad_norm" and value not in (None, float("inf")):
            raise ValueError(
                f"poptorch.optim.{name}(max_grad_norm={value}): gradient clipping is not "
                f"supported by popdist-emu yet; remove it."
            )


class SGD(Optimizer, torch.optim.SGD):
    """``poptorch.optim.SGD``: ``torch.optim.SGD`` plus PopTorch's IPU arguments (accepted)."""

    def __init__(self, params: ParamsT, lr: float, **kwargs: Any) -> None:
        _pop_ipu_arguments(kwargs, "SGD")
        super().__init__(params, lr=lr, **kwargs)


class Adam(Optimizer, torch.optim.Adam):
    """``poptorch.optim.Adam``: ``torch.optim.Adam`` plus PopTorch's IPU arguments."""

    def __init__(self, params: ParamsT, lr: float = 1e-3, **kwargs: Any) -> None:
        _pop_ipu_arguments(kwargs, "Adam")
        kwargs.pop("bias_correction", None)  # PopTorch's default (True) is torch's
        super().__init__(params, lr=lr, **kwargs)


class AdamW(Optimizer, torch.optim.AdamW):
    """``poptorch.optim.AdamW``: ``torch.optim.AdamW`` (weight decay 0.01) plus IPU arguments."""

    def __init__(self, params: ParamsT, lr: float = 1e-3, **kwargs: Any) -> None:
        _pop_ipu_arguments(kwargs, "AdamW")
        kwargs.pop("bias_correction", None)
        super().__init__(params, lr=lr, **kwargs)


class RMSprop(Optimizer, torch.optim.RMSprop):
    """``poptorch.optim.RMSprop``: ``torch.optim.RMSprop`` plus PopTorch's IPU arguments.

    ``use_tf_variant=True`` (Graphcore's EfficientNet, ``--optimizer rmsprop_tf``) is
    TensorFlow's RMSprop as PopTorch describes it: the average of squared gradients starts
    at one, eps is inside the square root, and the learning rate goes into the momentum
    buffer (``buf = momentum * buf + lr * g / sqrt(v + eps)``; ``p -= buf``).
    """

    def __init__(self, params: ParamsT, lr: float = 1e-2, **kwargs: Any) -> None:
        _pop_ipu_arguments(kwargs, "RMSprop")
        self.use_tf_variant = bool(kwargs.pop("use_tf_variant", False))
        super().__init__(params, lr=lr, **kwargs)


class LAMB(Optimizer, torch.optim.Optimizer):
    """``poptorch.optim.LAMB``: Adam's moments, then a layer-wise trust ratio.

    Per weight tensor ``w``, with Adam's bias-corrected moments ``m_hat`` and ``v_hat``:
    ``u = m_hat / (sqrt(v_hat) + eps) + weight_decay * w`` and
    ``w -= lr * (|w| / |u|) * u``, the ratio 1 where either norm is 0 (You et al. 2020,
    Algorithm 2; ``optax.lamb``). The defaults are PopTorch's. The object holds the
    settings for ``trainingModel``, which makes the update; like PopTorch's, it does not
    update weights on the host (its ``step`` is ``torch.optim.Optimizer``'s).

    ``bias_correction=False`` (Graphcore's BERT ``LAMBNoBiasCorrection``, GPT-2, CLIP) uses
    the moments as they are: ``u = m / (sqrt(v) + eps) + weight_decay * w``, as PopTorch's
    LAMB does. An argument left None takes PopTorch's default (ViT passes ``betas=None``).

    ``max_weight_norm`` (FastPitch; BERT and ViT pass None, per group too) clips the weight's
    norm in the ratio, PopTorch's phi(z) = min(z, max_weight_norm): ``w -= lr *
    (min(|w|, max) / |u|) * u``; under replicated tensor sharding the clip applies to the
    whole tensor's norm. None does not clip (PopTorch then clips at float16's 65500, which
    only a norm above it would notice). Groups that set different values are refused when the
    update is built (one clip for the whole optimiser).
    """

    # PopTorch's defaults, for the arguments a program leaves unset or passes as None.
    _DEFAULTS = (("lr", 1e-3), ("betas", (0.9, 0.999)), ("eps", 1e-8), ("weight_decay", 1e-2))

    def __init__(
        self,
        params: ParamsT,
        lr: float | None = None,
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        weight_decay: float | None = None,
        bias_correction: bool | None = None,
        max_weight_norm: float | None = None,
        **kwargs: Any,
    ) -> None:
        _pop_ipu_arguments(kwargs, "LAMB")
        if kwargs:
            raise TypeError(f"poptorch.optim.LAMB: unexpected arguments {sorted(kwargs)}.")
        given = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        defaults = {**dict(self._DEFAULTS), **{k: v for k, v in given.items() if v is not None}}
        defaults["bias_correction"] = bias_correction is None or bool(bias_correction)
        super().__init__(params, {**defaults, "max_weight_norm": max_weight_norm})


def optimiser_hyperparams(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The single parameter group's hyper-parameters (what ``setOptimizer`` may change).

    Args:
        optimizer: a ``torch.optim`` (or ``poptorch.optim``) SGD, Adam, AdamW or RMSprop.

    Returns:
        The group's settings (``lr``, ``momentum``, ``betas``, ...), without ``params``.

    Raises:
        ValueError: several parameter groups, or a setting the mapping cannot honour.
    """
    if len(optimizer.param_groups) != 1:
        raise ValueError(
            f"{type(optimizer).__name__} with {len(optimizer.param_groups)} parameter groups: "
            f"popdist-emu changes the learning rate of one group only so far."
        )
    return _group_settings(optimizer, optimizer.param_groups[0])


def _group_settings(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> dict[str, Any]:
    """One parameter group's settings, checked to be ones the mapping knows."""
    group = {k: v for k, v in group.items() if k != "params"}
    for flag in ("amsgrad", "maximize"):
        if group.get(flag):
            raise ValueError(
                f"{type(optimizer).__name__}({flag}=True): not supported by popdist-emu; remove it."
            )
    return group


def to_optax(
    optimizer: torch.optim.Optimizer, names: dict[str, torch.Tensor] | None = None
) -> Optimiser:
    """The optax transformation making ``optimizer``'s update, learning rate injected.

    Several parameter groups (PyTorch's per-parameter options, e.g. no weight decay on
    biases) become ``optax.multi_transform``, one transformation and state per group, as
    ``torch.optim`` keeps them; a weight in no group is not updated, as in PyTorch.

    Args:
        optimizer: ``torch.optim.SGD``/``Adam``/``AdamW``/``RMSprop`` or PopTorch's.
        names: the trained weights by the names of the parameter tree the transformation
            is applied to (needed when there are several groups).

    Returns:
        An ``optax.inject_hyperparams`` transformation whose ``learning_rate`` can be
        changed (one group), or the groups' ``multi_transform``.

    Raises:
        ValueError: another optimiser, or settings the mapping cannot honour.
    """
    groups = optimizer.param_groups
    if isinstance(optimizer, LAMB):
        return _lamb(optimizer, names)
    if len(groups) == 1:
        return _group_transform(optimizer, _group_settings(optimizer, groups[0]))
    return optax.multi_transform(
        {
            **{
                str(k): _group_transform(optimizer, _group_settings(optimizer, g))
                for k, g in enumerate(groups)
            },
            "frozen": optax.set_to_zero(),
        },
        _group_labels(optimizer, names),
    )


def _group_labels(
    optimizer: torch.optim.Optimizer, names: dict[str, torch.Tensor] | None
) -> dict[str, str]:
    """Each weight's parameter group (its index) by name; ``frozen`` for one in none."""
    groups = optimizer.param_groups
    if names is None:
        raise ValueError(
            f"{type(optimizer).__name__} with {len(groups)} parameter groups: the weights' "
            f"names are needed to tell the groups apart."
        )
    label_of = {id(p): str(k) for k, g in enumerate(groups) for p in g["params"]}
    return {name: label_of.get(id(tensor), "frozen") for name, tensor in names.items()}


def _lamb(optimizer: LAMB, names: dict[str, torch.Tensor] | None) -> Optimiser:
    """LAMB as ``optax.chain(adam + weight decay, trust ratio, learning rate)`` with its parts
    kept (``popdist_emu.runtime.layerwise``); several groups are one ``multi_transform`` on
    each side of the trust ratio (a frozen weight's direction is zero, its ratio 1)."""
    inners: dict[Hashable, optax.GradientTransformation] = {}
    tails: dict[Hashable, optax.GradientTransformation] = {}
    group_clips = [_clip(_group_settings(optimizer, g)) for g in optimizer.param_groups]
    clip: float | ClipByName | None = group_clips[0]
    if len(set(group_clips)) > 1:  # BERT: its biases' group 0 (a ratio of 1), the others None
        labels = _group_labels(optimizer, names)  # a frozen weight's direction is zero
        by_name = {n: None if k == "frozen" else group_clips[int(k)] for n, k in labels.items()}
        clip = tuple(sorted(by_name.items()))
    for k, group in enumerate(optimizer.param_groups):
        settings = _group_settings(optimizer, group)
        b1, b2 = (float(b) for b in settings["betas"])
        eps = float(settings["eps"])
        moments = (
            optax.scale_by_adam(b1=b1, b2=b2, eps=eps)
            if settings.get("bias_correction", True)
            else _scale_by_uncorrected_moments(b1, b2, eps)
        )
        inners[str(k)] = optax.chain(
            moments,
            optax.add_decayed_weights(float(settings.get("weight_decay", 0.0))),
        )
        # The learning rate injected, so setOptimizer can change it.
        tails[str(k)] = optax.inject_hyperparams(optax.scale_by_learning_rate)(
            learning_rate=float(settings["lr"])
        )
    if len(inners) == 1:
        return layerwise(inners["0"], tails["0"], max_weight_norm=clip)
    labels = _group_labels(optimizer, names)
    frozen: dict[Hashable, optax.GradientTransformation] = {"frozen": optax.set_to_zero()}
    return layerwise(
        optax.multi_transform({**inners, **frozen}, labels),
        optax.multi_transform({**tails, **frozen}, labels),
        max_weight_norm=clip,
    )


def _clip(settings: dict[str, Any]) -> float | None:
    """A group's ``max_weight_norm`` as a float, or None (no clip)."""
    value = settings.get("max_weight_norm")
    return None if value is None else float(value)


def _scale_by_uncorrected_moments(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """``optax.scale_by_adam`` without its bias correction: ``m / (sqrt(v) + eps)``, the
    moments updated as optax updates them and kept in its state type (so the optimiser's
    state maps onto PyTorch's as Adam's does). optax has no switch for it."""

    def init(params: Any) -> optax.ScaleByAdamState:
        mu = optax.tree_utils.tree_zeros_like(params)
        nu = optax.tree_utils.tree_zeros_like(params)
        return optax.ScaleByAdamState(count=jax.numpy.zeros([], jax.numpy.int32), mu=mu, nu=nu)

    def update(
        updates: Any, state: optax.ScaleByAdamState, params: Any = None
    ) -> tuple[Any, optax.ScaleByAdamState]:
        del params
        mu = optax.tree_utils.tree_update_moment(updates, state.mu, b1, 1)
        nu = optax.tree_utils.tree_update_moment_per_elem_norm(updates, state.nu, b2, 2)
        scaled = jax.tree.map(lambda m, v: m / (jax.numpy.sqrt(v) + eps), mu, nu)
        count = optax.safe_increment(state.count)
        return scaled, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)  # type: ignore[arg-type]


def _in_float32(inner: optax.GradientTransformation) -> optax.GradientTransformation:
    """``inner`` computed in float32 for half-precision weights, its state (momentum, Adam's
    moments) kept in float32, the update cast back to each weight's type: PopTorch keeps
    optimiser state in float32 unless told otherwise (``first_order_momentum_accum_type``,
    ``second_order_momentum_accum_type``), and a float16 second moment (a squared gradient)
    underflows to zero, which makes Adam's step ``m / eps`` (BERT's ``.half()`` model
    diverged so)."""

    def wide(tree: Any) -> Any:
        return jax.tree.map(lambda x: x.astype(jax.numpy.float32), tree)

    def init(params: Any) -> Any:
        return inner.init(wide(params))

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        new, state = inner.update(wide(updates), state, None if params is None else wide(params))
        return jax.tree.map(lambda n, u: n.astype(u.dtype), new, updates), state

    return optax.GradientTransformation(init, update)


def _group_transform(
    optimizer: torch.optim.Optimizer, group: dict[str, Any]
) -> optax.GradientTransformation:
    """The transformation of one parameter group's settings, in float32 (``_in_float32``)."""
    return _in_float32(_group_float32_transform(optimizer, group))


def _group_float32_transform(
    optimizer: torch.optim.Optimizer, group: dict[str, Any]
) -> optax.GradientTransformation:
    """The transformation of one parameter group's settings."""
    lr, wd = float(group["lr"]), float(group.get("weight_decay", 0.0))
    if isinstance(optimizer, torch.optim.SGD):
        momentum, dampening = float(group["momentum"]), float(group["dampening"])
        nesterov = bool(group["nesterov"])
        if dampening:
            # torch skips dampening on the first step (the buffer starts as the gradient).
            raise ValueError(
                f"SGD(dampening={dampening}): not supported by popdist-emu yet; remove it."
            )

        def sgd(learning_rate: float | jax.Array) -> optax.GradientTransformation:
            parts = [optax.add_decayed_weights(wd)] if wd else []
            if momentum:
                parts.append(optax.trace(decay=momentum, nesterov=nesterov))
            parts.append(optax.scale_by_learning_rate(learning_rate))
            return optax.chain(*parts)

        return optax.inject_hyperparams(sgd)(learning_rate=lr)
    if isinstance(optimizer, torch.optim.AdamW | torch.optim.Adam):
        b1, b2 = (float(b) for b in group["betas"])
        eps = float(group["eps"])
        decoupled = isinstance(optimizer, torch.optim.AdamW)

        def adam(learning_rate: float | jax.Array) -> optax.GradientTransformation:
            if decoupled:
                return optax.adamw(learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=wd)
            parts = [optax.add_decayed_weights(wd)] if wd else []
            parts.append(optax.adam(learning_rate, b1=b1, b2=b2, eps=eps))
            return optax.chain(*parts)

        return optax.inject_hyperparams(adam)(learning_rate=lr)
    if isinstance(optimizer, torch.optim.RMSprop):
        tf = bool(getattr(optimizer, "use_tf_variant", False))
        return optax.inject_hyperparams(_rmsprop(group, tf))(learning_rate=lr)
    raise ValueError(
        f"{type(optimizer).__name__}: popdist-emu maps SGD, Adam, AdamW, RMSprop (torch.optim "
        f"or poptorch.optim) and poptorch.optim.LAMB so far; use one of those."
    )


def _rmsprop(
    group: dict[str, Any], tf: bool = False
) -> Callable[..., optax.GradientTransformation]:
    """RMSprop's transformation of one group's settings, its learning rate an argument
    (``tf``: TensorFlow's variant, see :class:`RMSprop`)."""
    wd, alpha, eps = (float(group[k]) for k in ("weight_decay", "alpha", "eps"))
    momentum = float(group["momentum"])
    scale = optax.scale_by_stddev if group["centered"] else optax.scale_by_rms

    def rmsprop(learning_rate: float | jax.Array) -> optax.GradientTransformation:
        parts = [optax.add_decayed_weights(wd)] if wd else []
        if tf:  # the learning rate inside the momentum buffer
            parts.append(scale(decay=alpha, eps=eps, initial_scale=1.0, eps_in_sqrt=True))
            parts.append(optax.scale_by_learning_rate(learning_rate))
            if momentum:
                parts.append(optax.trace(decay=momentum))
            return optax.chain(*parts)
        parts.append(scale(decay=alpha, eps=eps, eps_in_sqrt=False))
        if momentum:
            parts.append(optax.trace(decay=momentum))
        parts.append(optax.scale_by_learning_rate(learning_rate))
        return optax.chain(*parts)

    return rmsprop
