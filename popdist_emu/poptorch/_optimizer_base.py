"""``poptorch.optim.Optimizer``: the base of PopTorch's optimisers, and ``variable_attrs``.

PopTorch's optimisers share a base class (programs test ``isinstance(optimizer,
poptorch.optim.Optimizer)`` to tell them from ``torch.optim``'s) and carry
``variable_attrs``: which hyper-parameters are compiled in as constants and which stay
variables that ``setOptimizer`` may change without a recompile (Graphcore's BERT marks
``max_weight_norm`` constant). The marks are kept and checked against the optimiser's
hyper-parameters; they change no number: what ``setOptimizer`` may change here is the
learning rate (``_learning_rate.changed_learning_rate``), which is never marked constant by the
applications.

References:
    PopTorch User Guide, "Optimizers" (``poptorch.optim.VariableAttributes``:
    ``markAsConstant``, ``markAsVariable``, ``isConstant``); graphcore/examples
    ``nlp/bert/pytorch/optimization.py`` (``variable_attrs.markAsConstant``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


# PopTorch's own hyper-parameters, which its optimisers take beside torch's (the emulator
# accepts them without keeping them in ``defaults``): they may be marked too.
_POPTORCH_ATTRIBUTES = (
    "loss_scaling",
    "velocity_scaling",
    "max_weight_norm",
    "bias_correction",
    "use_tf_variant",
)


class VariableAttributes:
    """Which of an optimiser's hyper-parameters are constants (PopTorch's marks).

    Args:
        optimizer: the optimiser whose hyper-parameters (its defaults' keys) are marked.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self._optimizer = optimizer
        self._constant: set[str] = set()

    def _check(self, call: str, attr: str) -> str:
        known = {*self._optimizer.defaults, *_POPTORCH_ATTRIBUTES}
        if attr not in known:
            raise ValueError(
                f"{type(self._optimizer).__name__}.variable_attrs.{call}({attr!r}): not a "
                f"hyper-parameter of this optimiser; pass one of {', '.join(sorted(known))}."
            )
        return attr

    def markAsConstant(self, attr: str) -> None:  # noqa: N802
        """Marks ``attr`` a constant of the compiled step."""
        self._constant.add(self._check("markAsConstant", attr))

    def markAsVariable(self, attr: str) -> None:  # noqa: N802
        """Marks ``attr`` a variable ``setOptimizer`` may change."""
        self._constant.discard(self._check("markAsVariable", attr))

    def isConstant(self, attr: str) -> bool:  # noqa: N802
        """Whether ``attr`` is marked constant."""
        return self._check("isConstant", attr) in self._constant


class Optimizer:
    """The base (a mixin of ``torch.optim.Optimizer`` subclasses) of PopTorch's optimisers."""

    defaults: dict[str, Any]

    @property
    def variable_attrs(self) -> VariableAttributes:
        """The optimiser's constant and variable hyper-parameters (made on first use)."""
        attrs = vars(self).get("_variable_attrs")
        if attrs is None:
            attrs = VariableAttributes(self)  # type: ignore[arg-type]
            vars(self)["_variable_attrs"] = attrs
        return attrs
