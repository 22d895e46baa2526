"""``poptorch.custom_op``: a PopART custom operation, run from its registered reference.

On an IPU, ``poptorch.custom_op(inputs, name, domain, domain_version, example_outputs,
attributes=...)`` inserts the PopART operator that a shared library (built from C++ against
the Poplar SDK and loaded with ``ctypes``) registered under the identifier ``(domain, name,
domain_version)``, and returns its outputs, shaped and typed like ``example_outputs``. The
emulator has no PopART, so an operator runs from a reference implementation in PyTorch,
registered under the same identifier with :func:`register_custom_op`: a function of the
input tensors and the attributes as keyword arguments, returning a tensor or a sequence of
them. It is ordinary torch code, so it runs in eager PyTorch and inside the models
``poptorch.trainingModel`` traces through torchax, and autograd (JAX's, in training) gives its
gradient. Its outputs are checked against ``example_outputs`` (count, shape, dtype), and an
operator without a reference is refused in one line naming it and the registration call.

The references that ship with the emulator are those of the operators Graphcore's
applications use:

- ``RemapCE`` (domain ``ai.graphcore``, version 1; GPT-2's logits and attention,
  ``nlp/gpt2/pytorch/custom_ops/remap_tensor_ce.cpp``): copies its input into a tensor laid
  out linearly over the tiles in grains of ``grain_size`` elements, for a cheaper
  cross-entropy; the values are the input's and its gradient op copies the incoming gradient
  the same way, so it is an identity on values and gradients here (the attribute is
  required, as the C++ op's creator requires it).

The attributes are checked as PopTorch checks them: string keys; values that are ints,
floats, strings or lists/tuples of one of those types; ASCII only.

References:
    PopTorch User Guide, section "poptorch.custom_op" (its arguments; "for the users who are
    familiar with PopART"), https://docs.graphcore.ai/projects/poptorch-user-guide/en/latest/
    overview.html; graphcore/poptorch
    ``python/ops.py`` (the attribute checks); PopART User Guide, "Custom operators"
    (operator identifiers: domain, name, version); graphcore/examples
    ``nlp/gpt2/pytorch/custom_ops/remap_tensor_ce.cpp`` and ``model/optimized_gpt2_attn.py``,
    ``train_gpt2.py`` (the calls).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_Key = tuple[str, str, int]
_REFERENCES: dict[_Key, Callable[..., Any]] = {}


def register_custom_op(
    name: str, domain: str, domain_version: int, implementation: Callable[..., Any]
) -> None:
    """Registers the PyTorch reference of the custom operator ``(domain, name,
    domain_version)``, which ``poptorch.custom_op`` then runs (replacing an earlier one).

    Args:
        name: the operator's name, as the program passes it to ``custom_op``.
        domain: its domain (e.g. ``"ai.graphcore"``, ``"com.acme"``).
        domain_version: its domain's version.
        implementation: ``implementation(*inputs, **attributes)`` returning a tensor or a
            sequence of tensors, computed with torch operations only.

    Raises:
        ValueError: a name or domain that is not a string, a version that is not an int, or
            an implementation that is not callable.
    """
    if not isinstance(name, str) or not isinstance(domain, str):
        raise ValueError(
            f"register_custom_op(name={name!r}, domain={domain!r}): pass the operator's name "
            f"and domain as strings, e.g. ('LeakyRelu', 'custom.ops', 1, fn)."
        )
    if isinstance(domain_version, bool) or not isinstance(domain_version, int):
        raise ValueError(
            f"register_custom_op(domain_version={domain_version!r}): pass an int, e.g. 1."
        )
    if not callable(implementation):
        raise ValueError(
            f"register_custom_op({name!r}): implementation {implementation!r} is not callable; "
            f"pass a function of the input tensors and the attributes."
        )
    _REFERENCES[(domain, name, domain_version)] = implementation


def custom_op(
    inputs: Sequence[torch.Tensor],
    name: str,
    domain: str,
    domain_version: int,
    example_outputs: Sequence[torch.Tensor],
    attributes: dict[str, Any] | None = None,
) -> list[torch.Tensor]:
    """The outputs of the custom operator ``(domain, name, domain_version)`` on ``inputs``,
    from its registered reference (module docstring).

    Returns:
        The operator's outputs, a list shaped and typed like ``example_outputs``.

    Raises:
        NotImplementedError: no reference is registered for the operator.
        ValueError: ``inputs`` or ``example_outputs`` not a sequence of tensors, attributes
            PopTorch refuses, or outputs unlike ``example_outputs``.
    """
    import torch

    op = f"poptorch.custom_op({name!r}, domain={domain!r}, version={domain_version!r})"
    for what, given in (("inputs", inputs), ("example_outputs", example_outputs)):
        if not isinstance(given, list | tuple) or not all(
            isinstance(t, torch.Tensor) for t in given
        ):
            raise ValueError(
                f"{op}: `{what}` must be a list or tuple of tensors, got {given!r}; pass e.g. [x]."
            )
    _check_attributes(op, attributes or {})
    reference = _REFERENCES.get((domain, name, domain_version))
    if reference is None:
        raise NotImplementedError(
            f"{op}: no reference implementation is registered (the emulator cannot build or "
            f"run the C++ op); register a PyTorch one before the model runs: "
            f"poptorch.register_custom_op({name!r}, {domain!r}, {domain_version!r}, fn) with "
            f"fn(*inputs, **attributes) returning the outputs."
        )
    result = reference(*inputs, **(attributes or {}))
    outputs = [result] if isinstance(result, torch.Tensor) else list(result)
    got = [(tuple(t.shape), t.dtype) for t in outputs]
    want = [(tuple(t.shape), t.dtype) for t in example_outputs]
    if got != want:
        raise ValueError(
            f"{op}: the reference returned outputs of (shape, dtype) {got}, but "
            f"example_outputs says {want}; make the two agree."
        )
    return outputs


def _check_attributes(op: str, attributes: dict[str, Any]) -> None:
    """PopTorch's checks of ``attributes`` (module docstring), in one line each."""
    if not isinstance(attributes, dict):
        raise ValueError(f"{op}: `attributes` must be a dict, got {attributes!r}.")
    for key, value in attributes.items():
        if not isinstance(key, str):
            raise ValueError(f"{op}: attribute key {key!r} is not a string; all keys must be.")
        items = list(value) if isinstance(value, list | tuple) else [value]
        if not all(isinstance(v, float | int | str) for v in items) or (
            isinstance(value, list | tuple) and any(type(v) is not type(items[0]) for v in items)
        ):
            raise ValueError(
                f"{op}: attribute {key}={value!r} must be a float, int or string, or a list or "
                f"tuple of one of these types."
            )
        for text in [key, *(v for v in items if isinstance(v, str))]:
            if not text.isascii():
                raise ValueError(f"{op}: attribute {text!r} contains non-ASCII characters.")


def _remap_ce(data: torch.Tensor, *, grain_size: int, debug_str: str = "remap") -> torch.Tensor:
    """``RemapCE``: a copy laid out for the IPU's tiles; here the same values (a copy, so the
    output is a tensor of its own, with the identity as gradient)."""
    del grain_size, debug_str
    return data.clone()


register_custom_op("RemapCE", "ai.graphcore", 1, _remap_ce)
