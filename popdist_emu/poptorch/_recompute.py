"""PopART's recomputation on one IPU: the step itself recomputes, so numbers, time and memory
follow.

``poptorch.recomputationCheckpoint`` marks its tensors with ``jax.ad_checkpoint
.checkpoint_name`` while :func:`recomputed` traces the forward (torchax hands it tensors
that wrap JAX arrays); otherwise it returns them unchanged (eager PyTorch, a step that
recomputes nothing, a pipeline), since a checkpoint without recomputation is an identity
and a marked copy would be counted as a second saved activation. When a program without a
pipeline sets ``opts._Popart.set("autoRecomputation",
int(popart.RecomputationType.RecomputeAll))``, :func:`recomputed` makes the training step's
loss recompute as PopART's ``RecomputeAll`` does, and the data-parallel step measures what
it saves (``popdist_emu.programs``: the vjp's residuals and the jaxpr's FLOPs,
recomputation included):

- every forward operation on the path to the loss is recomputed in the backward pass,
  except the checkpointed tensors, which are kept: the forward up to the last checkpoint
  runs under ``jax.checkpoint`` with ``save_only_these_names`` of the checkpoint's name;
- the operations after the last checkpoint are kept, not recomputed (PopART's
  ``allCheckpointAfterLastCheckpoint``: recomputing the last segment would run it twice
  back to back), so without any checkpoint ``RecomputeAll`` keeps every activation, as no
  recomputation does; values the forward computed before the last checkpoint and uses after
  it (a skip connection around it) are kept too.

Decisions where the documentation is silent or the model has no counterpart:

- ``Standard`` on one IPU is PopART's liveness heuristic (``annotateStandard``: forward
  operations cut into decreasing intervals of about ``0.75 sqrt(2N)`` operations, the live
  set of least memory in each kept), which depends on PopART's op schedule and tensor
  sizes; the emulator does not reproduce it and keeps every activation, the larger bound,
  as it does for ``NormOnly``; ``Pipeline`` means nothing without a pipeline
  (PopART's ``autoAnnotate`` refuses it) and keeps every activation too;
- the activations charged are what the step keeps (the checkpoints and the last segment),
  as for any ``jax.checkpoint`` in a data-parallel step (``examples/resnet50.py``'s
  per-block recomputation too); the working set of the segment being recomputed during its
  backward is not added to them;
- a pipelined model keeps today's behaviour: its stages stash only their inputs and
  recompute (``_placement.recomputation``), so the checkpoints change nothing there.

References:
    Graphcore, "Memory and Performance Optimisation on the IPU", section 5.3
    (recomputation, checkpoints); PopTorch User Guide, "Recomputation"
    (``poptorch.recomputationCheckpoint``) and "Options" (``_Popart.set``); PopART
    ``willow/src/recompute.cpp`` (github.com/graphcore/popart: ``annotateRecomputeAll``,
    ``allCheckpointAfterLastCheckpoint``, ``annotateStandard``) and ``intervals.cpp``
    (``getDecreasingIntervals``); JAX documentation, "Gradient checkpointing with
    ``jax.checkpoint``" (``checkpoint_name``, ``jax.checkpoint_policies
    .save_only_these_names``) and "Writing custom Jaxpr interpreters".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, overload

import jax
from jax.ad_checkpoint import checkpoint_name
from jax.core import Tracer
from jax.extend import core as jcore

from popdist_emu._jaxpr_run import evaluate_eqns

if TYPE_CHECKING:
    import torch

CHECKPOINT = "poptorch_recomputation_checkpoint"  # the name recomputationCheckpoint gives
RECOMPUTE_ALL = 4  # PopART's RecomputationType::RecomputeAll (``_poptorch_groups``)
_MARKING: list[bool] = []  # non-empty while ``marking_checkpoints`` is active


@contextlib.contextmanager
def marking_checkpoints() -> Iterator[None]:
    """Inside, ``recomputationCheckpoint`` names the traced tensors it is given."""
    _MARKING.append(True)
    try:
        yield
    finally:
        _MARKING.pop()


@overload
def recomputationCheckpoint(tensor: torch.Tensor, /) -> torch.Tensor: ...


@overload
def recomputationCheckpoint(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]: ...


def recomputationCheckpoint(*tensors: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:  # noqa: N802
    """``poptorch.recomputationCheckpoint``: its tensors, the same values, marked as kept
    for the backward pass when the model recomputes (one tensor as itself, several as a
    tuple).

    While :func:`recomputed` traces the forward the tensors wrap JAX arrays (torchax), and
    each is named :data:`CHECKPOINT`; otherwise they come back unchanged.
    """
    marked = tuple(_marked(t) for t in tensors)
    return marked[0] if len(marked) == 1 else marked


def _marked(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` named as a checkpoint if it wraps a JAX array (torchax), else itself."""
    import torchax
    from torchax.tensor import Tensor

    if not _MARKING or not isinstance(tensor, Tensor):
        return tensor
    env = torchax.default_env()
    marked: torch.Tensor = env.j2t_iso(checkpoint_name(env.t2j_iso(tensor), CHECKPOINT))
    return marked


def recomputed(
    loss: Callable[[Any, Any], Any], auto_recomputation: int | None
) -> Callable[[Any, Any], Any]:
    """The step's ``loss(params, micro_batch)``, recomputing as PopART's
    ``autoRecomputation`` asks on one IPU (the module docstring says how).

    Args:
        loss: the forward to the loss (and the outputs, for a step that returns them).
        auto_recomputation: the PopART ``RecomputationType`` the program set (None: none).

    Returns:
        ``loss`` itself unless the program set ``RecomputeAll``; else the same function,
        which traces ``loss`` once for each signature it is called with and, where the
        forward has a checkpoint, runs it up to the last one under ``jax.checkpoint``
        that keeps only the checkpoints.
    """
    if auto_recomputation != RECOMPUTE_ALL:
        return loss
    programs: dict[Any, Callable[[Any, Any], Any]] = {}

    def recomputing(params: Any, micro_batch: Any) -> Any:
        leaves, tree = jax.tree.flatten((params, micro_batch))
        key = (tree, tuple((tuple(leaf.shape), leaf.dtype) for leaf in leaves))
        program = programs.get(key)
        if program is None:
            program, constant = _split_at_last_checkpoint(loss, params, micro_batch)
            if constant:  # kept only if it holds no value of the trace in progress
                programs[key] = program
        return program(params, micro_batch)

    return recomputing


def _split_at_last_checkpoint(
    loss: Callable[[Any, Any], Any], params: Any, micro_batch: Any
) -> tuple[Callable[[Any, Any], Any], bool]:
    """``loss`` traced with its checkpoints marked: the forward up to the last checkpoint
    under ``jax.checkpoint`` keeping only the checkpoints, the rest as it is (``loss``
    itself when the forward has no checkpoint); and whether that function closes over
    no tracer (a value of the trace in progress cannot be reused by another trace)."""
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), (params, micro_batch))
    with marking_checkpoints():
        closed, out_shape = jax.make_jaxpr(loss, return_shape=True)(*shapes)
    jaxpr = closed.jaxpr
    marks = [k for k, e in enumerate(jaxpr.eqns) if e.params.get("name") == CHECKPOINT]
    constant = not any(isinstance(c, Tracer) for c in closed.consts)
    if not marks:  # PopART keeps everything from the loss back to the last checkpoint
        return loss, constant
    head, tail = jaxpr.eqns[: marks[-1] + 1], jaxpr.eqns[marks[-1] + 1 :]
    needed = {v for e in tail for v in e.invars if isinstance(v, jcore.Var)}
    needed |= {v for v in jaxpr.outvars if isinstance(v, jcore.Var)}
    crossing = [v for e in head for v in e.outvars if v in needed]
    sources = [*jaxpr.constvars, *jaxpr.invars]
    run_head = jax.checkpoint(
        lambda *values: evaluate_eqns(head, dict(zip(sources, values, strict=True)), crossing),
        policy=jax.checkpoint_policies.save_only_these_names(CHECKPOINT),
    )
    out_tree = jax.tree.structure(out_shape)

    def split(params: Any, micro_batch: Any) -> Any:
        values = [*closed.consts, *jax.tree.leaves((params, micro_batch))]
        env = dict(zip(sources, values, strict=True))
        env.update(zip(crossing, run_head(*values), strict=True))
        return jax.tree.unflatten(out_tree, evaluate_eqns(tail, env, jaxpr.outvars))

    return split, constant
