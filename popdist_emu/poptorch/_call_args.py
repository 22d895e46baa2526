"""A call's keyword arguments as the positional inputs of the model's forward.

PopTorch accepts ``model(input_ids=..., labels=...)`` (Graphcore's GPT-2 calls its training
model so) and passes the inputs to the forward in the order of its signature; an argument
left out before a given one takes its default. The emulator lays out and traces positional
inputs, so a call's arguments are bound to the forward's signature first.

References:
    PopTorch User Guide, "Efficient data batching" and ``PoplarExecutor.__call__`` (inputs
    given as positional or keyword arguments of the model's forward).
    Python documentation, ``inspect.Signature.bind``.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch


def forward_args(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple:
    """``args`` and ``kwargs`` as the forward's positional arguments, up to the last given.

    Raises:
        TypeError: an argument the forward does not take, or one left out before a given
            one that has no default (the call names it).
    """
    if not kwargs:
        return args
    signature = inspect.signature(model.forward)
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError as error:
        raise TypeError(
            f"poptorch: {type(model).__name__}.forward{signature} does not take this call's "
            f"arguments ({error}); pass the forward's own argument names."
        ) from None
    names = list(signature.parameters)
    last = max(names.index(name) for name in bound.arguments)
    values = []
    for name in names[: last + 1]:
        if name in bound.arguments:
            values.append(bound.arguments[name])
        elif signature.parameters[name].default is not inspect.Parameter.empty:
            values.append(signature.parameters[name].default)
        else:
            raise TypeError(
                f"poptorch: {type(model).__name__}.forward's argument {name!r} is missing "
                f"before later ones given by name; pass it too."
            )
    return tuple(values)
