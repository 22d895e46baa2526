"""Running and rewriting a jaxpr's equations, for the layers that trace programs.

``programs`` measures a recomputed forward segment by segment, and ``poptorch`` runs the
traced forward in parts (its blocks, the part before the last recomputation checkpoint) and
takes ``checkpoint_name`` equations out of a trace; both need the same two operations, so
they live in this base module, open to every layer.

References:
    JAX documentation, "Writing custom Jaxpr interpreters" (``primitive.bind`` over a
    jaxpr's equations); ``jax.ad_checkpoint.checkpoint_name``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.extend.core as jex

# ``jax.ad_checkpoint.checkpoint_name``'s primitive: it names a value and computes nothing.
NAME_PRIMITIVE = "name"


def evaluate_eqns(
    eqns: Sequence[jex.JaxprEqn],
    env: dict[jex.Var, Any],
    out_vars: Sequence[jex.Var | jex.Literal],
) -> list[Any]:
    """``eqns`` evaluated from ``env`` (as JAX's ``eval_jaxpr`` does, on a run of a jaxpr's
    equations rather than a whole one): the values of ``out_vars``. ``env`` gains every
    value computed."""
    read = lambda v: v.val if isinstance(v, jex.Literal) else env[v]  # noqa: E731
    for eqn in eqns:
        bound = eqn.primitive.get_bind_params(eqn.params)
        subfuns, bind_params = bound if isinstance(bound, tuple) else ((), bound)
        # The equation's name stack goes with it (a traced PyTorch operation's scope, which
        # the memory count reads: ``programs._op_residuals``).
        scope = str(eqn.source_info.name_stack)
        with eqn.ctx.manager, jax.named_scope(scope) if scope else contextlib.nullcontext():
            outs = eqn.primitive.bind(*subfuns, *(read(v) for v in eqn.invars), **bind_params)
        outs = outs if eqn.primitive.multiple_results else [outs]
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in out_vars]


def without_names(closed: jex.ClosedJaxpr) -> jex.ClosedJaxpr:
    """``closed`` without its top-level ``checkpoint_name`` equations (each named value is
    the value it names): the same computation, with no second copy of a value for a vjp to
    save."""
    jaxpr = closed.jaxpr
    alias: dict[jex.Var, Any] = {}

    def read(v: Any) -> Any:
        return alias.get(v, v) if isinstance(v, jex.Var) else v

    eqns = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == NAME_PRIMITIVE:
            alias[eqn.outvars[0]] = read(eqn.invars[0])
            continue
        eqns.append(eqn.replace(invars=[read(v) for v in eqn.invars]))
    if not alias:
        return closed
    return closed.replace(jaxpr=jaxpr.replace(eqns=eqns, outvars=[read(v) for v in jaxpr.outvars]))
