"""The traced program cut into blocks: each equation belongs to the block active when it ran.

The torch module is traced with ``jax.named_scope(block)`` entered whenever a block begins
(``BeginBlock``'s forward pre-hook, or ``poptorch.Block``); every equation of the jaxpr then
carries its block as the first component of its name stack. :func:`split_blocks` cuts the
jaxpr into contiguous runs of one block and gives a :class:`popdist_emu.BlockModel` whose
blocks pass on, as a tuple, exactly the values later blocks (or the loss) use. Equations
before the first block belong to the first block, or to a block of their own on IPU 0
where the first block is on another IPU (``_stages``).

``trainingModel`` runs the BlockModel under the strategy that ``PipelinedExecution`` or
``ShardedExecution`` maps onto (``_stages.emulator_strategy``).

References:
    JAX documentation, "Understanding jaxprs" and "Writing custom Jaxpr interpreters"
    (evaluating equations with ``primitive.bind``); ``jax.named_scope``; PopTorch User
    Guide, "Multi-IPU execution strategies" (an operation belongs to the block it ran in).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
from jax.extend import core as jcore

import popdist_emu
from popdist_emu._jaxpr_run import evaluate_eqns

# A block's ``fn(block_params, carry)``: the carry on (a tuple), or the loss for the last block;
# the first block's carry is the micro-batch, whatever pytree the model takes.
_BlockFunction = Callable[[dict[str, jax.Array], Any], jax.Array | tuple[jax.Array, ...]]


def _block_of(eqn: jcore.JaxprEqn, names: Sequence[str], current: str) -> str:
    stack = str(eqn.source_info.name_stack)
    head = stack.split("/", 1)[0] if stack else ""
    return head if head in names else current


def split_blocks(
    fn: Callable[[dict[str, jax.Array], Any], jax.Array],
    params: Mapping[str, jax.Array | jax.ShapeDtypeStruct],
    micro_batch: Any,
    names: Sequence[str],
) -> popdist_emu.BlockModel:
    """``fn(params, micro_batch) -> loss``, traced, as a BlockModel of the blocks ``names``
    (each block's name scope is its name; see :func:`cut_blocks`)."""
    return cut_blocks(jax.make_jaxpr(fn)(params, micro_batch), params, names)


def cut_blocks(
    closed: jcore.ClosedJaxpr,
    params: Mapping[str, jax.Array | jax.ShapeDtypeStruct],
    scopes: Sequence[str],
    names: Sequence[str] | None = None,
) -> popdist_emu.BlockModel:
    """The traced ``loss(params, micro_batch)`` as a BlockModel of its blocks.

    Args:
        closed: the loss function's jaxpr, traced with ``jax.named_scope(scope)`` around
            each block's operations.
        params: the weights by name (arrays or shapes): the jaxpr's first inputs.
        scopes: each block's name scope, in model order.
        names: each block's name (None: its scope).

    Returns:
        The BlockModel; each block owns the weights its equations read (a weight two
        blocks read, such as a decoder tied to the embedding, belongs to both).

    Raises:
        ValueError: a block runs in two separate places.
    """
    label = dict(zip(scopes, scopes if names is None else names, strict=True))
    jaxpr = closed.jaxpr
    weight_names = list(params)
    n_weights = len(jax.tree.leaves(params))
    weight_vars = dict(zip(jaxpr.invars[:n_weights], sorted(weight_names), strict=True))
    batch_vars = jaxpr.invars[n_weights:]
    runs: list[tuple[str, list[jcore.JaxprEqn]]] = []
    current = scopes[0]
    for eqn in jaxpr.eqns:
        current = _block_of(eqn, scopes, current)
        if not runs or runs[-1][0] != current:
            if any(name == current for name, _ in runs):
                raise ValueError(
                    f"block {label[current]!r} runs in two separate parts of the forward "
                    f"(block {label[runs[-1][0]]!r} runs between them); the emulator's "
                    "stages need each block to be one contiguous part: give the parts "
                    "different ids."
                )
            runs.append((current, []))
        runs[-1][1].append(eqn)
    # A weight belongs to every block that reads it (a tied embedding and decoder); the
    # pipeline's rules then ask that all those blocks run on one IPU.
    readers: dict[str, set[jcore.Var]] = {name: set() for name, _ in runs}
    for name, eqns in runs:
        for eqn in eqns:
            readers[name] |= {v for v in eqn.invars if not isinstance(v, jcore.Literal)}
    constants = dict(zip(jaxpr.constvars, closed.consts, strict=True))
    blocks: list[tuple[str, _BlockFunction, list[jcore.Var], tuple[str, ...]]] = []
    for k, (name, eqns) in enumerate(runs):
        later = [e for _, es in runs[k + 1 :] for e in es]
        needed = {v for e in later for v in e.invars if not isinstance(v, jcore.Literal)}
        needed |= {v for v in jaxpr.outvars if not isinstance(v, jcore.Literal)}
        defined = [v for e in eqns for v in e.outvars]
        carried_in = batch_vars if k == 0 else blocks[-1][2]
        out_vars = [v for v in (*carried_in, *defined) if v in needed and v not in weight_vars]
        own = tuple(sorted(weight_vars[v] for v in readers[name] if v in weight_vars))
        last = k == len(runs) - 1
        outs = list(jaxpr.outvars) if last else out_vars
        run = _runner(eqns, list(carried_in), outs, own, weight_vars, constants, last)
        blocks.append((name, run, out_vars, own))
    return popdist_emu.BlockModel(
        [popdist_emu.Block(label[name], run, own) for name, run, _, own in blocks]
    )


def _runner(
    eqns: list[jcore.JaxprEqn],
    in_vars: list[jcore.Var],
    out_vars: Sequence[jcore.Var | jcore.Literal],
    own: tuple[str, ...],
    weight_vars: dict[jcore.Var, str],
    constants: dict[jcore.Var, jax.Array],
    last: bool,
) -> _BlockFunction:
    """One block's function: its equations evaluated on the carry and its own weights; the
    last block returns the program's last output (the loss), the others the carry on."""
    by_name = {n: v for v, n in weight_vars.items()}

    def run(block_params: dict[str, jax.Array], carry: Any) -> jax.Array | tuple[jax.Array, ...]:
        env: dict[jcore.Var, jax.Array] = dict(constants)
        leaves = jax.tree.leaves(carry)
        env.update(zip(in_vars, leaves, strict=True))
        env.update({by_name[n]: block_params[n] for n in own})
        values = evaluate_eqns(eqns, env, out_vars)
        return values[-1] if last else tuple(values)

    return run


@contextlib.contextmanager
def block_scopes() -> Iterator[Callable[[str], None]]:
    """A switch that closes the active block's ``jax.named_scope`` and opens the next."""
    stack = contextlib.ExitStack()

    def begin(name: str) -> None:
        stack.close()
        stack.enter_context(jax.named_scope(name))

    try:
        yield begin
    finally:
        stack.close()
