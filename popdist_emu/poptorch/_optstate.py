"""The optimiser's state on the host: the trainer's optax state in ``torch.optim``'s layout.

PopTorch keeps the optimiser state on the IPU and the host optimiser in step with it: after
training, ``optimizer.state_dict()`` holds it, ``torch.save`` checkpoints it, and an
optimiser whose state was loaded (``load_state_dict``) before ``trainingModel`` starts from
it. Here :class:`HostOptimiserState` does both for a :class:`PoplarExecutor`:

- reading: ``optimizer.state_dict()`` (a ``torch.optim`` state-dict pre-hook) and
  ``detachFromDevice``/``destroy`` write the trainer's current optax state into
  ``optimizer.state``, per parameter, in PyTorch's names: ``momentum_buffer`` (SGD with
  momentum); ``step``, ``exp_avg``, ``exp_avg_sq`` (Adam, AdamW; ``step`` a float32 scalar
  tensor, as ``torch.optim`` keeps it); ``step``, ``square_avg`` and, when set,
  ``momentum_buffer`` and ``grad_avg`` (RMSprop); LAMB the names and the plain-int ``step``
  of PopTorch's own ``LAMB.step`` (Adam's);
- loading: a non-empty ``optimizer.state`` when the trainer is built becomes its initial
  optax state, so a program that saved ``optimizer.state_dict()`` resumes where it stopped,
  bit for bit (the values are the optax state's own, both ways); ``load_state_dict`` on the
  optimiser of a model already trained replaces the trainer's state at once, as PopTorch
  writes it to the IPU.

The two layouts hold the same quantities, so the mapping is exact for what the emulator
computes: SGD's trace is PyTorch's ``momentum_buffer`` (Nesterov's too: both keep the plain
trace and add ``momentum * buf`` only to the update; ``dampening``, which PyTorch skips on
the first step, is refused by ``to_optax``); Adam's, AdamW's and LAMB's moments are the
uncorrected ones in both, the bias correction applied to the update from the step count,
and optax's count of updates done is PyTorch's ``step``; RMSprop's averages are the same
recurrences (eps outside the root in both, ``eps_in_sqrt=False``), its ``step`` the count of
its ``inject_hyperparams`` state. Where the formulas differ only in float32 rounding
(PyTorch's ``lerp`` for the first moment, ``sqrt(v) / sqrt(1 - b2^t)`` against
``sqrt(v / (1 - b2^t))``), the state holds the emulator's numbers: within rounding of eager
PyTorch's, and bit for bit what the emulator resumes from. PopTorch's own documentation says
its state dictionary differs from PyTorch's in names and structure; the emulator uses
PyTorch's, so a state from eager PyTorch loads too (a decision: PopTorch's layout is not
public).

The state is read lazily (when ``state_dict()`` asks, or at detach), not after every call:
the copy costs host time and, under replicated tensor sharding, a gather of the shards over
the instances (every instance must then call ``state_dict()``, as with
``popdist_emu.runtime``'s checkpoints).

References:
    PopTorch User Guide, "Reading and writing optimizer state" and "Inspecting optimiser
    state" (https://docs.graphcore.ai/projects/poptorch-user-guide/); PyTorch documentation,
    ``torch.optim.Optimizer.state_dict``, ``register_state_dict_pre_hook``, ``torch.optim.SGD``,
    ``Adam``, ``AdamW``, ``RMSprop`` (the state's names); graphcore/poptorch
    ``python/optim.py`` (``LAMB.step``: ``step``, ``exp_avg``, ``exp_avg_sq``); optax
    documentation (``ScaleByAdamState``, ``TraceState``, ``ScaleByRmsState``,
    ``ScaleByRStdDevState``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import optax
import torch

from popdist_emu.poptorch.optim import LAMB
from popdist_emu.runtime import full_opt_state, place_opt_state

if TYPE_CHECKING:
    from popdist_emu.poptorch._model import PoplarExecutor
    from popdist_emu.runtime import Trainer

# A parameter's state in PyTorch's layout.
TorchState = dict[str, Any]
_Injected = optax.InjectStatefulHyperparamsState | optax.InjectHyperparamsState


class HostOptimiserState:
    """Keeps an executor's torch optimiser's ``state`` in step with its trainer's.

    Args:
        executor: the training model (held weakly: the optimiser's hook must not keep it).
    """

    def __init__(self, executor: PoplarExecutor) -> None:
        self._executor = weakref.ref(executor)
        self._hooked: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        if executor._optimizer is not None:
            self.follow(executor._optimizer)

    def follow(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """``optimizer.state_dict()`` reads this model's state from now on, and its
        ``load_state_dict()`` writes it (PopTorch's "to/from the IPU"); returns it."""
        if optimizer not in self._hooked:
            self._hooked.add(optimizer)
            ref: weakref.ref[HostOptimiserState] = weakref.ref(self)
            optimizer.register_state_dict_pre_hook(lambda opt: _through(ref, opt, "write"))
            optimizer.register_load_state_dict_post_hook(lambda opt: _through(ref, opt, "load"))
        return optimizer

    def _named(self) -> dict[str, torch.Tensor]:
        """The trained weights by the trainer's names (the torch ``Parameter`` objects)."""
        executor = self._executor()
        assert executor is not None  # the executor holds this object
        state = executor._user_model.state_dict(keep_vars=True)
        return {name: state[name] for name in executor._names}

    def load(self, trainer: Trainer) -> Trainer:
        """Starts ``trainer`` from the optimiser's state, if it has one; returns it.

        Raises:
            ValueError: a state the mapping cannot take (another optimiser's, a shape that
                is not the weight's, weights at different steps).
        """
        executor = self._executor()
        optimizer = None if executor is None else executor._optimizer
        if optimizer is None or trainer.state is None or not any(optimizer.state.values()):
            return trainer
        # A fresh state as the template (its structure, dtypes, shapes): no gather of shards.
        like = jax.tree.map(np.asarray, trainer.optimiser.init(trainer.params))
        full = to_optax_state(optimizer, self._named(), like)
        place_opt_state(trainer, full, f"{type(optimizer).__name__}.state")
        return trainer

    def to_host(self) -> None:
        """Copies the weights into the module and the state into the optimiser (PopTorch's
        ``detachFromDevice`` and ``destroy`` do both)."""
        executor = self._executor()
        if executor is not None:
            executor.copyWeightsToHost()
            self.write()

    def write(self) -> None:
        """Writes the trainer's state into the optimiser's ``state`` (PyTorch's layout)."""
        executor = self._executor()
        if executor is None or executor._trainer is None or executor._trainer.state is None:
            return
        executor._host_weights.refresh()  # PopTorch syncs the weights with the state
        optimizer = executor._optimizer
        named = self._named()
        by_name = to_torch_state(optimizer, full_opt_state(executor._trainer))
        name_of = {id(p): n for n, p in named.items()}
        for group in optimizer.param_groups:  # PyTorch's order: the groups' parameters'
            for param in group["params"]:
                if name_of.get(id(param)) in by_name:
                    optimizer.state[param] = by_name[name_of[id(param)]]


def _through(
    ref: weakref.ref[HostOptimiserState], optimizer: torch.optim.Optimizer, way: str
) -> None:
    """The optimiser's hooks: after ``state_dict()`` the model's state is written into it,
    after ``load_state_dict()`` its state is the trainer's, if it is still the model's."""
    host = ref()
    executor = None if host is None else host._executor()
    if host is None or executor is None or executor._optimizer is not optimizer:
        return
    if way == "write":
        host.write()
    elif executor._trainer is not None:
        host.load(executor._trainer)


# ----------------------------------------------------------------- optax -> torch
def to_torch_state(optimizer: torch.optim.Optimizer, opt_state: Any) -> dict[str, TorchState]:
    """Each trained weight's state in PyTorch's names, from a whole optax state (host arrays).

    Args:
        optimizer: the optimiser the state is for (it decides ``step``'s type).
        opt_state: the state :func:`popdist_emu.poptorch.optim.to_optax`'s transformation
            keeps, gathered whole.

    Returns:
        ``{weight name: {"exp_avg": tensor, ...}}``; weights without state are absent.
    """
    out: dict[str, TorchState] = {}
    plain_step = isinstance(optimizer, LAMB)  # PopTorch's LAMB.step keeps an int

    def step(count: Any) -> Any:
        return int(count) if plain_step else torch.tensor(float(count), dtype=torch.float32)

    def read(node: Any, count: Any) -> bool:
        fields = _FIELDS.get(type(node))
        if fields is None:
            return False
        # Adam's own count; RMSprop's is its injection's (a tuple's .count is a method)
        own = node.count if isinstance(node, optax.ScaleByAdamState) else count
        for key, field in fields.items():
            for name, value in getattr(node, field).items():
                if isinstance(value, np.ndarray | jax.Array):
                    entry = out.setdefault(name, {})
                    entry[key] = torch.from_numpy(np.array(value))
                    if isinstance(node, _WITH_STEP):
                        entry["step"] = step(own)
        return True

    _walk(opt_state, read)
    return {name: dict(sorted(entry.items(), key=_key_rank)) for name, entry in out.items()}


# PyTorch's order of the keys (its state_dict() lists them so).
_ORDER = ("step", "exp_avg", "exp_avg_sq", "square_avg", "momentum_buffer", "grad_avg")


def _key_rank(item: tuple[str, Any]) -> int:
    return _ORDER.index(item[0])


# The optax states the mapping knows: PyTorch's name of each per-weight field.
_FIELDS: dict[type, dict[str, str]] = {
    optax.ScaleByAdamState: {"exp_avg": "mu", "exp_avg_sq": "nu"},
    optax.TraceState: {"momentum_buffer": "trace"},
    optax.ScaleByRmsState: {"square_avg": "nu"},
    optax.ScaleByRStdDevState: {"square_avg": "nu", "grad_avg": "mu"},
}
# Those whose weights carry PyTorch's ``step`` (SGD's momentum does not).
_WITH_STEP = (optax.ScaleByAdamState, optax.ScaleByRmsState, optax.ScaleByRStdDevState)


def _walk(node: Any, visit: Callable[[Any, Any], bool], count: Any = None) -> None:
    """Calls ``visit(node, count)`` on every node of an optax state until it takes one;
    ``count`` is the nearest ``inject_hyperparams`` state's update count (RMSprop's step)."""
    if isinstance(node, _Injected):
        count = node.count
    if visit(node, count):
        return
    if isinstance(node, tuple | list | dict):
        for child in node.values() if isinstance(node, dict) else node:
            _walk(child, visit, count)


# ----------------------------------------------------------------- torch -> optax
def to_optax_state(
    optimizer: torch.optim.Optimizer, named: dict[str, torch.Tensor], like: Any
) -> Any:
    """The optax state that continues from ``optimizer.state`` (PyTorch's layout).

    Args:
        optimizer: an optimiser whose ``state`` was loaded (``load_state_dict``) or written.
        named: the trained weights by the optax state's names.
        like: the optax state to fill (its fresh ``init``, host arrays): its structure,
            dtypes and the weights' shapes.

    Returns:
        ``like`` with every weight's fields, and the update counts, taken from the state.

    Raises:
        ValueError: a key the mapping does not know or lacks, a shape that is not the
            weight's, weights at different steps, or state for some weights only.
    """
    kind = type(optimizer).__name__
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    given = {n: dict(optimizer.state.get(p, {})) for n, p in named.items() if id(p) in held}
    missing = sorted(n for n, s in given.items() if not s)
    if missing and len(missing) < len(given):
        raise ValueError(
            f"{kind}.state has no entry for {missing[0]} but has some for other weights: "
            f"the emulator steps every weight together; load a whole state or none."
        )
    steps = {_as_int(s.pop("step")) for s in given.values() if "step" in s}
    if len(steps) > 1:
        raise ValueError(
            f"{kind}.state holds weights at steps {sorted(steps)}: the emulator steps "
            f"every weight together; load a state whose weights share one step."
        )
    step = steps.pop() if steps else None
    used: set[tuple[str, str]] = set()

    def fill(node: Any) -> Any:
        fields = _FIELDS.get(type(node))
        if fields is None:
            return None
        replaced: dict[str, Any] = {
            field: {
                name: _take(kind, given.get(name), name, key, value, used)
                for name, value in getattr(node, field).items()
            }
            for key, field in fields.items()
        }
        if isinstance(node, optax.ScaleByAdamState):
            replaced["count"] = _count(node.count, step)
        return node._replace(**replaced)

    state = _rebuild(like, fill, step)
    extra = sorted((n, k) for n, s in given.items() for k in s if (n, k) not in used)
    if extra:
        name, key = extra[0]
        raise ValueError(
            f"{kind}.state[{name}] has {key!r}, which {kind} with these settings does not "
            f"keep: load the state of the same optimiser class and settings."
        )
    return state


def _take(
    kind: str,
    given: TorchState | None,
    name: str,
    key: str,
    like: Any,
    used: set[tuple[str, str]],
) -> Any:
    """One weight's field from its torch state, checked against the optax leaf ``like``."""
    if not isinstance(like, np.ndarray | jax.Array) or not given:
        return like  # a weight of another group (masked), or no state loaded
    value = given.get(key)
    if not isinstance(value, torch.Tensor):
        raise ValueError(
            f"{kind}.state[{name}] has no tensor {key!r} (it has {sorted(given)}): "
            f"load the state of the same optimiser class and settings."
        )
    if tuple(value.shape) != tuple(like.shape):
        raise ValueError(
            f"{kind}.state[{name}][{key!r}] has shape {list(value.shape)}, the weight "
            f"{list(like.shape)}: load the state saved for this model."
        )
    used.add((name, key))
    return np.asarray(value.detach().cpu().numpy(), dtype=like.dtype)


def _rebuild(node: Any, fill: Callable[[Any], Any], step: int | None) -> Any:
    """``node`` with every known state replaced by ``fill``'s and ``inject_hyperparams``'
    counts set to ``step`` (its number of updates)."""
    filled = fill(node)
    if filled is not None:
        return filled
    if isinstance(node, _Injected):
        inner = _rebuild(node.inner_state, fill, step)
        return node._replace(count=_count(node.count, step), inner_state=inner)
    if isinstance(node, dict):
        return {k: _rebuild(v, fill, step) for k, v in node.items()}
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        return type(node)(*(_rebuild(v, fill, step) for v in node))
    if isinstance(node, tuple | list):
        return type(node)(_rebuild(v, fill, step) for v in node)
    return node


def _count(like: Any, step: int | None) -> Any:
    """An optax update count holding ``step`` (``like`` unchanged without one)."""
    return like if step is None else np.asarray(step, dtype=np.asarray(like).dtype)


def _as_int(step: Any) -> int:
    """PyTorch's ``step`` (a tensor, float or int) as the whole number it counts."""
    value = float(step.item() if isinstance(step, torch.Tensor) else step)
    if value != int(value) or value < 0:
        raise ValueError(f"optimizer state step={value}: expected a whole number of updates.")
    return int(value)
