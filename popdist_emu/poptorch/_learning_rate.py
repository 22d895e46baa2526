"""``PoplarExecutor.setOptimizer``: the new learning rates, each parameter group's.

PopTorch's ``setOptimizer`` takes an optimiser of the class the model was compiled with and
copies its changed hyper-parameters onto the device without recompiling; programs call it
after every ``lr_scheduler.step()`` (Graphcore's BERT and GPT-2 do, on every step; its CNNs
and ViT after every scheduler step). A scheduler scales every parameter group's rate (these
applications keep biases and norms in a group of their own, without weight decay), so each
group's new rate is set in the optimiser state, in the group's own ``inject_hyperparams``
state (``optim.to_optax`` makes one per group, inside ``optax.multi_transform`` under the
group's index as label).

References:
    PopTorch User Guide, "Optimizers" and ``PoplarExecutor.setOptimizer`` (the optimiser
    attributes that may change between runs without a recompilation); PyTorch
    documentation, "Per-parameter options" (``param_groups``).
    optax documentation, ``optax.multi_transform`` and ``optax.inject_hyperparams``.
"""

from __future__ import annotations

from typing import Any, cast

import jax
import numpy as np
import optax
import torch

from popdist_emu.runtime import ShardedOptState, StreamingState

# The states ``optax.inject_hyperparams`` makes (the stateful one since optax 0.2).
_Injected = optax.InjectStatefulHyperparamsState | optax.InjectHyperparamsState
_RATE = ("lr", "initial_lr")  # what a scheduler changes


def changed_learning_rates(
    old: torch.optim.Optimizer | None, new: torch.optim.Optimizer
) -> list[float]:
    """The new learning rate of each parameter group of ``setOptimizer(new)`` on a model
    trained with ``old``.

    Raises:
        ValueError: no ``old`` (an inference model), another optimiser class, another
            number of groups or a change other than the learning rates.
    """
    if old is None:
        raise ValueError(
            "setOptimizer: an inference model has no optimiser; call it on the model "
            "poptorch.trainingModel returned."
        )
    old_groups, new_groups = _settings(old), _settings(new)
    if type(old) is not type(new) or len(old_groups) != len(new_groups):
        raise ValueError(
            "setOptimizer: popdist-emu changes the learning rate only so far; keep the "
            "optimiser's class and its parameter groups."
        )
    if any(_fixed(a) != _fixed(b) for a, b in zip(old_groups, new_groups, strict=True)):
        raise ValueError(
            "setOptimizer: popdist-emu changes the learning rate only so far; keep the "
            "optimiser's class and its other settings."
        )
    return [float(group["lr"]) for group in new_groups]


def _fixed(settings: dict[str, Any]) -> dict[str, Any]:
    """A group's settings that ``setOptimizer`` may not change: all but its rate."""
    return {k: v for k, v in settings.items() if k not in _RATE}


def _settings(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """Each group's settings without its tensors (their identity is the model's)."""
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def set_learning_rates(opt_state: Any, rates: list[float]) -> Any:
    """The optimiser state made by ``optim.to_optax`` with each group's learning rate set.

    The state is optax's own, streamed out (``StreamingState``: optimiser state offloaded,
    BERT's default) or sharded (``ShardedOptState``: replicated tensor sharding); the last
    two keep it as flat leaves and their structure, in which a learning rate is one whole
    scalar leaf (it mirrors no weight, so no shard splits it).

    Args:
        opt_state: the trainer's optimiser state.
        rates: the new rate of each parameter group, in the optimiser's order.

    Returns:
        The state with the new rates (of the same form; nothing else changed).

    Raises:
        ValueError: a state in which some group has no injected learning rate.
    """
    if isinstance(opt_state, StreamingState):
        leaves = _with_rates(opt_state.leaves, opt_state.treedef, rates)
        return opt_state._replace(leaves=leaves)
    if isinstance(opt_state, ShardedOptState):
        shards = tuple(_with_rates(s, opt_state.treedef, rates) for s in opt_state.shards)
        return opt_state._replace(shards=shards)
    flat, treedef = jax.tree_util.tree_flatten(opt_state)
    return jax.tree_util.tree_unflatten(treedef, _with_rates(tuple(flat), treedef, rates))


def _with_rates(leaves: tuple[Any, ...], treedef: Any, rates: list[float]) -> tuple[Any, ...]:
    """``leaves`` (of a state of structure ``treedef``) with each group's rate leaf set."""
    indices = jax.tree_util.tree_unflatten(treedef, list(range(len(leaves))))
    found = _injected_states(indices, None)
    groups = [0 if label is None else int(label) for label, _ in found]
    if sorted(set(groups)) != list(range(len(rates))):
        raise ValueError(
            f"setOptimizer: {len(rates)} parameter groups, but the optimiser state holds "
            f"learning rates for groups {sorted(set(groups))}; keep the optimiser's groups."
        )
    new = list(leaves)
    for group, (_, state) in zip(groups, found, strict=True):
        index = cast(int, state.hyperparams["learning_rate"])
        old = leaves[index]
        array = np if isinstance(old, np.ndarray) else jax.numpy
        new[index] = array.asarray(rates[group], dtype=old.dtype)
    return tuple(new)


def _injected_states(node: Any, label: str | None) -> list[tuple[str | None, _Injected]]:
    """The ``inject_hyperparams`` states inside an optimiser state, each with its group's
    label (None outside a ``multi_transform``): chains and layer-wise optimisers nest them in
    tuples, ``multi_transform`` in a dict by label."""
    if isinstance(node, _Injected):
        return [(label, node)]
    if isinstance(node, optax.MultiTransformState):
        return [
            found
            for key, inner in node.inner_states.items()
            if key != "frozen"
            for found in _injected_states(inner, str(key))
        ]
    if isinstance(node, tuple):
        return [found for part in node for found in _injected_states(part, label)]
    return []
