"""``setOptimizer``: a new learning rate for each parameter group, the optimiser state kept.

PopTorch's ``setOptimizer`` takes the optimiser again with new values; Graphcore's CNNs and
ViT call it after every scheduler step, with two parameter groups (weight decay on the
weights, none on biases and norms), each group's learning rate changed alike. The emulator
injects each group's learning rate (``optax.inject_hyperparams``), so a change writes the new
rates into the optimiser state; any other change is refused in one line.

References:
    PopTorch User Guide, "Model wrapping functions" (``setOptimizer``); PyTorch
    documentation, "Per-parameter options" (``param_groups``); optax documentation,
    ``optax.inject_hyperparams`` and ``optax.multi_transform``.
"""

from __future__ import annotations

from typing import Any, cast

import jax
import optax
import torch

from popdist_emu.poptorch.optim import _group_settings

# The states ``optax.inject_hyperparams`` makes (the stateful one since optax 0.2).
_Injected = optax.InjectStatefulHyperparamsState | optax.InjectHyperparamsState
_RATE = ("lr", "initial_lr")  # what a scheduler changes


def changed_learning_rate(
    old: torch.optim.Optimizer | None, new: torch.optim.Optimizer
) -> list[float]:
    """The new learning rate of each parameter group of ``setOptimizer(new)`` on a model
    trained with ``old``.

    Raises:
        ValueError: no ``old`` (an inference model), another optimiser class, another
            number of groups, or a change other than the learning rates.
    """
    if old is None:
        raise ValueError(
            "setOptimizer: an inference model has no optimiser; call it on the model "
            "poptorch.trainingModel returned."
        )
    olds, news = old.param_groups, new.param_groups

    def fixed(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in _group_settings(optimizer, group).items() if k not in _RATE}

    if (
        type(old) is not type(new)
        or len(olds) != len(news)
        or any(fixed(old, a) != fixed(new, b) for a, b in zip(olds, news, strict=True))
    ):
        raise ValueError(
            "setOptimizer: popdist-emu changes the learning rate only so far; keep the "
            "optimiser's class, its parameter groups and their other settings."
        )
    return [float(group["lr"]) for group in news]


def set_learning_rate(opt_state: Any, learning_rates: list[float]) -> None:
    """Sets each parameter group's learning rate inside an optimiser state made by
    ``optim.to_optax`` (groups in order).

    Raises:
        ValueError: a state whose injected learning rates are not one per group (sharded or
            offloaded).
    """
    injected = _injected_states(opt_state)
    if len(injected) != len(learning_rates):
        raise ValueError(
            f"setOptimizer: {len(learning_rates)} parameter group(s) but "
            f"{len(injected)} learning rate(s) in the optimiser state (sharded or offloaded "
            f"here); changing the learning rate there is not supported yet."
        )
    for state, rate in zip(injected, learning_rates, strict=True):
        hyperparams = state.hyperparams
        current = cast(jax.Array, hyperparams["learning_rate"])  # injected numbers are arrays
        hyperparams["learning_rate"] = jax.numpy.asarray(rate, dtype=current.dtype)


def _group_order(key: object) -> tuple[int, str]:
    """``multi_transform``'s labels: the groups ``"0"``, ``"1"``, ... in order, then others."""
    text = str(key)
    return (int(text), "") if text.isdigit() else (1 << 30, text)


def _injected_states(opt_state: Any) -> list[_Injected]:
    """The ``optax.inject_hyperparams`` states inside an optimiser state, group by group
    (chains and layer-wise optimisers nest them in tuples, ``multi_transform`` in a dict by
    group label); their ``hyperparams`` dicts are mutable."""
    if isinstance(opt_state, _Injected):
        return [opt_state]
    if isinstance(opt_state, dict):
        parts = [opt_state[k] for k in sorted(opt_state, key=_group_order)]
        return [found for part in parts for found in _injected_states(part)]
    if isinstance(opt_state, tuple):
        return [found for part in opt_state for found in _injected_states(part)]
    return []
