"""What a traced PyTorch forward saves for its backward pass, op by op as PopART saves it.

A JAX vjp saves whatever intermediates its lowering's derivative rules read: for a PyTorch
operation traced through torchax that includes values inside the operation. Its group norm
keeps the input reshaped, the input minus its mean in float32 (``jnp.var`` widens half
precision) and the normalised value; its SiLU keeps the input and its sigmoid. PopART
differentiates the ONNX graph PopTorch builds, one gradient operation per forward
operation, and a gradient operation reads its forward operation's inputs and outputs (and
small statistics, such as a norm's mean and inverse deviation), not the intermediates of
some lowering of it. Graphcore's EfficientNet-B4 configuration, which runs on two IPUs,
was refused here at 2.7 times the residuals PopART keeps for its group-normalised SiLU
layers.

torchax runs each PyTorch operation inside ``jax.named_scope`` of the operation's name
(``aten::native_group_norm``), so the equations of one operation are a run of equations
under that name. :func:`op_saved_values` keeps a residual that leaves its operation (some
other operation reads it in the forward pass: it is a value of the ONNX graph), and replaces
one that does not by what the operation's gradient reads instead: its inputs, or its outputs
for the operations whose PopART gradient is a function of the output (tanh, sigmoid, exp,
softmax).
A residual outside any PyTorch operation (a JAX program's, or the glue around a traced
forward) is kept as it is, so JAX programs are measured as before.

References:
    PopART user guide, "Automatic differentiation" (gradient operations built per forward
    operation, from its inputs and outputs), https://docs.graphcore.ai/projects/popart-user-guide/;
    PopART's gradient operations, https://github.com/graphcore/popart
    (``willow/src/popx/op/tanhx.cpp``, ``sigmoidx.cpp``, ``expx.cpp``, ``softmaxx.cpp``: they
    read the forward output);
    torchax, ``torchax/tensor.py`` (``Environment.dispatch`` runs each operation under
    ``jax.named_scope``), https://github.com/pytorch/xla/tree/master/torchax; JAX
    documentation, ``jax.named_scope`` (the name stack an equation records).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import jax.extend.core as jex

# The name torchax gives an ATen operation's scope (``OpOverload.name()``).
_TORCH_OP = re.compile(r"aten::[\w.]+")
# Operations whose PopART gradient reads the forward output, not the input: TanhGradOp,
# SigmoidGradOp and ExpGradOp take ``getFwdOutInIndex``, SoftmaxGradOp the probabilities
# (``getProbsInIndex``); popart/willow/src/popx/op/{tanhx,sigmoidx,expx,softmaxx}.cpp.
_OUTPUT_GRADIENT = frozenset({"aten::tanh", "aten::sigmoid", "aten::exp", "aten::_softmax"})


def torch_op_of(eqn: jex.JaxprEqn) -> str | None:
    """The PyTorch operation ``eqn`` was traced in (the outermost one in its name stack),
    or None outside any."""
    found = _TORCH_OP.search(str(eqn.source_info.name_stack))
    return found.group(0) if found else None


class OpRun(NamedTuple):
    """One traced PyTorch operation: its place among the jaxpr's operations and its name."""

    number: int
    name: str


def op_runs(eqns: Sequence[jex.JaxprEqn]) -> list[OpRun | None]:
    """The PyTorch operation each of ``eqns`` belongs to, or None outside any: consecutive
    equations under the same operation name are one operation (PopART's one ONNX
    operation), numbered from 0 in order; an equation outside any operation between two of
    the same name does not split them."""
    runs: list[OpRun | None] = []
    run: OpRun | None = None
    for eqn in eqns:
        name = torch_op_of(eqn)
        if name is not None and (run is None or name != run.name):
            run = OpRun(0 if run is None else run.number + 1, name)
        runs.append(run if name is not None else None)
    return runs


def op_saved_values(jaxpr: jex.Jaxpr, residuals: Sequence[jex.Var]) -> list[jex.Var]:
    """The values PopART keeps for ``residuals``, the vjp residuals ``jaxpr`` computes.

    Each residual made inside a PyTorch operation and read in ``jaxpr`` only by that
    operation is replaced by what the operation's gradient reads: its outputs for tanh,
    sigmoid, exp and softmax, its inputs otherwise; the rest are kept. Consecutive
    equations under the same operation name are one operation (:func:`op_runs`).
    Duplicates are removed.
    """
    run_of: dict[jex.Var, OpRun | None] = {}
    readers: dict[jex.Var, set[OpRun | None]] = {}
    run_inputs: dict[OpRun, list[jex.Var]] = {}
    run_made: dict[OpRun, list[jex.Var]] = {}
    for eqn, here in zip(jaxpr.eqns, op_runs(jaxpr.eqns), strict=True):
        for var in eqn.invars:
            if not isinstance(var, jex.Var):
                continue
            readers.setdefault(var, set()).add(here)
            if here is not None and run_of.get(var) != here:
                run_inputs.setdefault(here, []).append(var)
        run_of.update((var, here) for var in eqn.outvars)
        if here is not None:
            run_made.setdefault(here, []).extend(eqn.outvars)

    def read_by_gradient(run: OpRun) -> list[jex.Var]:
        if run.name in _OUTPUT_GRADIENT:  # what leaves the operation
            return [v for v in run_made.get(run, ()) if readers.get(v, set()) - {run}]
        return run_inputs.get(run, [])

    saved: list[jex.Var] = []
    for var in residuals:
        made = run_of.get(var)
        if made is None or readers.get(var, set()) - {made}:
            saved.append(var)
        else:
            saved.extend(read_by_gradient(made))
    return list(dict.fromkeys(saved))
