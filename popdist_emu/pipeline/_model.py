"""Model parallelism in the runtime: blocks, stages and the pipelined or sharded step.

A model is a sequence of named :class:`Block` s. Each block is a pure function
``fn(block_params, x) -> y`` of its own parameters (the top-level entries of the
parameter dict it owns) and the incoming activations: the first block takes the
micro-batch, the last returns the scalar loss (labels travel with the activations, as
PopTorch streams them to the IPU that computes the loss). Blocks are grouped into
:class:`Stage` s, each placed on an IPU of the replica (several stages may share one, and
blocks on one IPU may share a weight, as a tied embedding and decoder do), and an
execution strategy,
:class:`PipelinedExecution` or :class:`ShardedExecution` (PopTorch's names), is set in
``Options(execution_strategy=...)``.

One weight update of one replica runs the ``gradient_accumulation`` micro-batches through
the stages in the order of the strategy's schedule (``hardware.program_order``): a
forward pass sends its output to the next stage, the last stage computes the loss, and
each backward pass takes the gradient of its stage's output, computes its own
parameters' gradient and sends its input's gradient back. Each stage stashes its input
per micro-batch and its compiled backward program re-runs the stage's forward from that
input (recomputation, MPO section 5.3): XLA cannot hand a forward program's internal
residuals to another program, so the emulator always runs this way and ``recomputation``
changes what the hardware model stashes, not the numbers. Each stage accumulates its
gradient over the micro-batches in micro-batch order, so the pipelined and sharded
schedules (and recomputation on or off) add the same numbers in the same order: their
parameters are identical bit for bit. The stages' gradients are then laid out as the flat
accumulator the unpipelined micro-step produces (every parameter leaf in tree order, then
the loss sum), so the reduce-and-update stage (all-reduce, RTS, offloading) is unchanged.

References:
    PopTorch User Guide, "Multi-IPU execution strategies" (``poptorch.Block``,
    ``poptorch.Stage``, ``PipelinedExecution``, ``ShardedExecution``); Graphcore
    tutorials, "PopTorch: pipelining"; "Memory and Performance Optimisation on the IPU",
    sections 4.2 and 5.3.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

import hardware
from popdist_emu._options import Options
from popdist_emu.pipeline._rules import PipelineError, check_pipeline


@dataclasses.dataclass(frozen=True)
class Block:
    """A named part of the model (PopTorch's ``poptorch.Block``).

    Attributes:
        name: the block's name (``"B1"``).
        fn: ``fn(block_params, x) -> y``; ``block_params`` is ``{key: params[key]}`` for
            the keys it owns; the first block gets the micro-batch, the last returns the
            scalar loss.
        params: top-level keys of the parameter dict this block uses; blocks on one IPU
            may name the same key (a tied weight: its gradients add up).
    """

    name: str
    fn: Callable[[Any, Any], Any]
    params: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))


@dataclasses.dataclass(frozen=True)
class Stage:
    """Blocks run together on one IPU (PopTorch's ``poptorch.Stage``).

    Attributes:
        blocks: the blocks' names, in model order.
        ipu: the IPU of the replica it runs on; None places stage k on IPU k.
    """

    blocks: tuple[str, ...]
    ipu: int | None = None

    def __init__(self, *blocks: str, ipu: int | None = None) -> None:
        object.__setattr__(self, "blocks", tuple(blocks))
        object.__setattr__(self, "ipu", ipu)


def _stages(items: Sequence[str | Stage]) -> tuple[Stage, ...]:
    return tuple(item if isinstance(item, Stage) else Stage(item) for item in items)


@dataclasses.dataclass(frozen=True, init=False)
class PipelinedExecution:
    """Stages run as a pipeline over the replica's IPUs (the grouped schedule).

    ``PipelinedExecution("B1", "B2", "B3", "B4")`` places one block per stage on IPUs 0-3,
    as the PopTorch tutorial does; ``Stage`` objects group several blocks.
    """

    stages: tuple[Stage, ...]
    schedule: str = "grouped"
    strategy = "pipelined"

    def __init__(self, *stages: str | Stage, schedule: str = "grouped") -> None:
        object.__setattr__(self, "stages", _stages(stages))
        object.__setattr__(self, "schedule", schedule)
        hardware.check_strategy("pipelined", schedule)


@dataclasses.dataclass(frozen=True, init=False)
class ShardedExecution:
    """Stages run one after the other, one micro-batch at a time (PopTorch's sharding)."""

    stages: tuple[Stage, ...]
    schedule: str = "grouped"
    strategy = "sharded"

    def __init__(self, *stages: str | Stage) -> None:
        object.__setattr__(self, "stages", _stages(stages))
        object.__setattr__(self, "schedule", "grouped")


class BlockModel:
    """A model as named blocks; called as ``model(params, micro_batch)`` it is the plain
    (unpipelined) loss, so a ``Trainer`` without an execution strategy trains it as usual.
    """

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = tuple(blocks)
        names = [b.name for b in self.blocks]
        if len(set(names)) != len(names):
            raise PipelineError(f"block names {names} repeat: give every block its own name.")
        self._by_name = {b.name: b for b in self.blocks}

    def block(self, name: str) -> Block:
        """The block called ``name``."""
        if name not in self._by_name:
            raise PipelineError(
                f"stage names block {name!r}, which the model does not have: use one of "
                f"{list(self._by_name)}."
            )
        return self._by_name[name]

    def __call__(self, params: Any, micro_batch: Any) -> jax.Array:
        x = micro_batch
        for b in self.blocks:
            x = b.fn({k: params[k] for k in b.params}, x)
        return x

    def __hash__(self) -> int:
        return id(self)


def float_mask(tree: Any) -> list[bool]:
    """Which leaves of ``tree`` (in ``jax.tree`` order) are floating point: the ones that carry
    gradients between stages (integer leaves, such as labels, travel along without one)."""
    return [bool(jnp.issubdtype(jnp.result_type(x), jnp.floating)) for x in jax.tree.leaves(tree)]


def _merge(treedef: Any, mask: Sequence[bool], floats: Sequence[Any], others: Sequence[Any]) -> Any:
    fi, oi, leaves = iter(floats), iter(others), []
    for is_float in mask:
        leaves.append(next(fi) if is_float else next(oi))
    return jax.tree.unflatten(treedef, leaves)


def split_floats(tree: Any, mask: Sequence[bool]) -> tuple[list[Any], list[Any]]:
    """``tree``'s leaves as ``(floating-point leaves, other leaves)``, by :func:`float_mask`."""
    leaves = jax.tree.leaves(tree)
    return (
        [x for x, f in zip(leaves, mask, strict=True) if f],
        [x for x, f in zip(leaves, mask, strict=True) if not f],
    )


def stage_vjp(fn: Callable[[Any, Any], Any], params: Any, x: Any) -> Callable[..., Any]:
    """The vjp closure of a stage ``fn(params, x)``: with respect to its parameters and the
    floating-point leaves of its input, for the floating-point leaves of its output.

    Its leaves are what the stage's forward saves for its backward (the residuals), which is
    why the hardware model's activation count traces exactly this function.
    """
    mask = float_mask(x)
    xf, xo = split_floats(x, mask)
    treedef = jax.tree.structure(x)

    def f(p: Any, floats: Any) -> list[Any]:
        out = fn(p, _merge(treedef, mask, floats, xo))
        return [o for o in jax.tree.leaves(out) if jnp.issubdtype(o.dtype, jnp.floating)]

    return jax.vjp(f, params, xf)[1]


class StageProgram:
    """One stage's compiled forward and backward programs (compiled once, reused).

    ``forward(p, x) -> y``; ``backward(p, x, dy_floats) -> (dp, dx_floats)`` re-runs the
    forward from the stashed input and differentiates with respect to the parameters and
    the floating-point leaves of the input (integer leaves, such as labels, carry no
    gradient). The last stage's backward takes no cotangent: it differentiates the loss.
    """

    def __init__(self, fn: Callable, keys: tuple[str, ...], first: bool, last: bool) -> None:
        self.fn, self.keys, self.first, self.last = fn, keys, first, last
        self.forward = jax.jit(fn)
        self._backward: Any = None
        self._x_mask: Any = None
        self._y_mask: Any = None

    def _build(self, x: Any) -> None:
        x_def, x_mask = jax.tree.structure(x), float_mask(x)
        y_mask = self._y_mask
        fn, first, last = self.fn, self.first, self.last

        def backward(p, x_floats, x_others, dy_floats):
            def f(p, xf):
                out = fn(p, _merge(x_def, x_mask, xf, x_others))
                return out if last else split_floats(out, y_mask)[0]

            if first:
                out, vjp = jax.vjp(lambda p: f(p, x_floats), p)
                (dp,) = vjp(jnp.ones_like(out) if last else dy_floats)
                return dp, []
            out, vjp = jax.vjp(f, p, x_floats)
            return vjp(jnp.ones_like(out) if last else dy_floats)

        self._x_mask = x_mask
        self._backward = jax.jit(backward)

    def backward(self, p: Any, x: Any, dy_floats: Any) -> Any:
        """Parameter gradient and the input's float-leaf gradients of one micro-batch."""
        if self._backward is None:
            self._build(x)
        xf, xo = split_floats(x, self._x_mask)
        return self._backward(p, xf, xo, dy_floats)

    def observe_output(self, y: Any) -> None:
        """Records which output leaves are floating point (they carry gradients back)."""
        if self._y_mask is None and not self.last:
            self._y_mask = float_mask(y)

    def backward_program(self, x: Any) -> Any:
        """The jitted backward ``(p, x_floats, x_others, dy_floats) -> (dp, dx_floats)`` for
        inputs shaped like ``x``: what the profile lowers and compiles, as the step runs it.

        Call :meth:`observe_output` first for a stage that is not the last.
        """
        if self._backward is None:
            self._build(x)
        return self._backward

    def backward_arguments(self, p: Any, x: Any, y: Any) -> tuple[Any, Any, Any, Any]:
        """:meth:`backward_program`'s arguments for parameters ``p``, input ``x`` and output
        ``y`` (values or shapes): ``(p, x_floats, x_others, dy_floats)``, ``dy_floats`` None
        for the last stage, whose backward differentiates the loss."""
        self.backward_program(x)
        xf, xo = split_floats(x, self._x_mask)
        dy = None if self.last else split_floats(y, self._y_mask)[0]
        return p, xf, xo, dy


# (model, blocks, first, last) -> StageProgram; the model object is kept alive by its key.
_PROGRAMS: dict[tuple, StageProgram] = {}


class Pipeline:
    """A ``BlockModel`` placed on the IPUs of a replica under an execution strategy.

    Args:
        model: the model's blocks.
        strategy: ``PipelinedExecution`` or ``ShardedExecution``.
        params: the parameters (or their shapes): a dict whose top-level keys the blocks own.
        ipus_per_replica: IPUs of one replica (``Options.layout.ipus_per_replica``).
        gradient_accumulation: micro-batches per weight update.
        recomputation: stash only stage inputs in the hardware model.

    Raises:
        PipelineError: for a pipeline PopTorch or PopART refuses (one line each).
    """

    def __init__(
        self,
        model: BlockModel,
        strategy: PipelinedExecution | ShardedExecution,
        params: Any,
        *,
        ipus_per_replica: int,
        gradient_accumulation: int,
        recomputation: bool = False,
    ) -> None:
        if not isinstance(model, BlockModel):
            raise PipelineError(
                f"an execution strategy needs the loss as a popdist_emu.BlockModel of named "
                f"blocks, got {type(model).__name__}: build BlockModel([Block(...), ...])."
            )
        self.model, self.strategy = model, strategy
        self.recomputation = bool(recomputation)
        stages = strategy.stages or tuple(Stage(b.name) for b in model.blocks)
        check_pipeline(model, stages, params, ipus_per_replica, gradient_accumulation, strategy)
        self.stages = stages
        self.ipus = tuple(s.ipu if s.ipu is not None else i for i, s in enumerate(stages))
        self.stage_keys = tuple(
            tuple(k for name in s.blocks for k in model.block(name).params) for s in stages
        )
        n = len(stages)
        self.programs = tuple(
            self._program(s, self.stage_keys[i], i == 0, i == n - 1) for i, s in enumerate(stages)
        )
        self.gradient_accumulation = gradient_accumulation
        self._add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))

    def _program(self, stage: Stage, keys: tuple, first: bool, last: bool) -> StageProgram:
        """The stage's programs, shared by every pipeline of the same model and blocks (so
        pipelined and sharded runs of a model compile each stage once)."""
        key = (self.model, stage.blocks, first, last)
        if key not in _PROGRAMS:
            _PROGRAMS[key] = StageProgram(self._stage_fn(stage), keys, first, last)
        return _PROGRAMS[key]

    def _stage_fn(self, stage: Stage) -> Callable:
        blocks = [self.model.block(name) for name in stage.blocks]

        def run(p, x):
            for b in blocks:
                x = b.fn({k: p[k] for k in b.params}, x)
            return x

        return run

    @property
    def num_stages(self) -> int:
        """Stages of the pipeline (at least one per IPU of the replica)."""
        return len(self.stages)

    def stage_params(self, params: Any, s: int) -> dict[str, Any]:
        """The entries of ``params`` stage ``s`` owns."""
        return {k: params[k] for k in self.stage_keys[s]}

    def held_params(self, params: Any, s: int) -> dict[str, Any]:
        """The entries of ``params`` that stage ``s``'s IPU stores for it: its own, less any
        an earlier stage on the same IPU already stores (a tied weight is stored once)."""
        earlier = {k for j in range(s) if self.ipus[j] == self.ipus[s] for k in self.stage_keys[j]}
        return {k: params[k] for k in self.stage_keys[s] if k not in earlier}

    def accumulate(
        self, params: Any, micro_batches: Sequence[Any], zeros: jax.Array
    ) -> tuple[jax.Array, bool]:
        """One replica's weight update: the flat gradient-and-loss sum, and finiteness.

        Runs the passes in the strategy's schedule order; returns ``(acc, finite)`` shaped
        as ``make_micro_step``'s accumulator (``zeros`` gives its dtype and size).
        """
        n, ga = self.num_stages, len(micro_batches)
        ps = [self.stage_params(params, s) for s in range(n)]
        inputs: dict[tuple[int, int], Any] = {}
        outputs: dict[tuple[int, int], Any] = {}
        grads_in: dict[tuple[int, int], Any] = {}
        acc: list[Any] = [None] * n
        loss_sum = None
        for _, s, kind, m in hardware.program_order(n, ga, self.strategy.strategy):
            prog = self.programs[s]
            if kind == "forward":
                x = micro_batches[m] if s == 0 else outputs.pop((s - 1, m))
                inputs[(s, m)] = x  # the stash: this stage's input of micro-batch m
                y = prog.forward(ps[s], x)
                if s == n - 1:
                    loss = y.astype(zeros.dtype)
                    loss_sum = loss if loss_sum is None else loss_sum + loss
                else:
                    outputs[(s, m)] = y
                    prog.observe_output(y)
                continue
            x = inputs.pop((s, m))
            dy = None if s == n - 1 else grads_in.pop((s, m))
            dp, dx = prog.backward(ps[s], x, dy)
            acc[s] = dp if acc[s] is None else self._add(acc[s], dp)
            if s > 0:
                grads_in[(s - 1, m)] = list(dx)
        assert not inputs and not outputs and not grads_in, "pipeline schedule left work behind"
        if loss_sum is None:
            raise PipelineError("Pipeline.accumulate: `micro_batches` is empty; pass at least one.")
        grads: dict[str, Any] = {}
        for part in acc:  # a tied weight's gradients add up, in stage order
            for k, v in part.items():
                grads[k] = v if k not in grads else jax.tree.map(jnp.add, grads[k], v)
        tree = {k: grads[k] for k in params}
        flat = [leaf.ravel().astype(zeros.dtype) for leaf in jax.tree.leaves(tree)]
        total = jnp.concatenate([*flat, loss_sum.reshape(1)])
        return total, bool(jnp.all(jnp.isfinite(total)))


def make_pipeline(loss_fn: Any, options: Options, params: Any) -> Pipeline | None:
    """The trainer's pipeline from ``Options.execution_strategy`` (None without one).

    The replica's IPUs come from ``options.layout`` (resolved once, from PopRun or given
    explicitly), so a pipeline built outside the launcher with an explicit layout checks its
    stages against that layout rather than against the environment.

    Raises:
        PipelineError: a strategy that is not one of PopTorch's, or a pipeline PopTorch or
            PopART would refuse for this layout.
    """
    strategy = options.execution_strategy
    if strategy is None:
        return None
    if not isinstance(strategy, PipelinedExecution | ShardedExecution):
        raise PipelineError(
            f"Options: `execution_strategy` must be PipelinedExecution(...) or "
            f"ShardedExecution(...), got {strategy!r}."
        )
    return Pipeline(
        loss_fn,
        strategy,
        params,
        ipus_per_replica=options.layout.ipus_per_replica,
        gradient_accumulation=options.gradient_accumulation,
        recomputation=options.recomputation,
    )
