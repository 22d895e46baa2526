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
changes what the hardware model stashes, not the numbers. The stages' programs are compiled
once per step shape by the ``compile`` the pipeline is given (the runtime's
``compile_program``; see ``_stage_programs``) and held by the pipeline while it runs that
shape: the programs that run are the ones the hardware model profiles. Each stage
accumulates its gradient over the micro-batches in micro-batch order, so the pipelined and
sharded schedules (and recomputation on or off) add the same numbers in the same order:
their parameters are identical bit for bit. The stages' gradients are then laid out as the flat
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
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

import hardware
from popdist_emu._options import Options
from popdist_emu._trees import as_shape
from popdist_emu.pipeline._rules import PipelineError, check_pipeline
from popdist_emu.pipeline._stage_programs import (
    ArgumentsKey,
    CompileFn,
    StageFunctions,
    StagePrograms,
    arguments_key,
    compile_alone,
    compile_stages,
    stage_functions,
)


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


def block_model(model: object) -> BlockModel:
    """``model`` as the ``BlockModel`` an execution strategy needs.

    Raises:
        PipelineError: ``model`` is not a ``BlockModel`` (a plain loss function).
    """
    if not isinstance(model, BlockModel):
        raise PipelineError(
            f"an execution strategy needs the loss as a popdist_emu.BlockModel of named "
            f"blocks, got {type(model).__name__}: build BlockModel([Block(...), ...])."
        )
    return model


class Pipeline:
    """A ``BlockModel`` placed on the IPUs of a replica under an execution strategy.

    Args:
        model: the model's blocks.
        strategy: ``PipelinedExecution`` or ``ShardedExecution``.
        params: the parameters (or their shapes): a dict whose top-level keys the blocks own.
        ipus_per_replica: IPUs of one replica (``Options.layout.ipus_per_replica``).
        gradient_accumulation: micro-batches per weight update.
        recomputation: stash only stage inputs in the hardware model.
        compile: compiles the stages' programs, ``compile(fn, *args, label=...)``; the
            runtime passes ``popdist_emu.programs.compile_program`` (with the trainer's
            ``analysis_only``), so they are kept in the process's one bounded program cache
            and shared by pipelines of the same model. None compiles programs that only
            this pipeline holds (``compile_alone``).

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
        compile: CompileFn | None = None,
    ) -> None:
        self.model, self.strategy = block_model(model), strategy
        self.recomputation = bool(recomputation)
        stages = strategy.stages or tuple(Stage(b.name) for b in model.blocks)
        check_pipeline(model, stages, params, ipus_per_replica, gradient_accumulation, strategy)
        self.stages = stages
        self.ipus = tuple(s.ipu if s.ipu is not None else i for i, s in enumerate(stages))
        self.stage_keys = tuple(
            tuple(k for name in s.blocks for k in model.block(name).params) for s in stages
        )
        n = len(stages)
        self.functions: tuple[StageFunctions, ...] = tuple(
            stage_functions(model, s.blocks, i == 0, i == n - 1) for i, s in enumerate(stages)
        )
        self.gradient_accumulation = gradient_accumulation
        self._compile: CompileFn = compile_alone if compile is None else compile
        # The stage programs of the step shape in use (use, not a cache: a program evicted
        # from the process's cache keeps running here), and the shapes' key.
        self._held: tuple[ArgumentsKey, tuple[StagePrograms, ...]] | None = None
        self._add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))

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

    def compile(self, params: Any, micro_batch: Any) -> tuple[StagePrograms, ...]:
        """Every stage's forward and backward programs for these shapes, compiled by the
        pipeline's ``compile`` on first sight of the shapes and held while they are in use:
        what :meth:`accumulate` runs and the hardware model profiles.

        Args:
            params: the parameters (values or ``jax.ShapeDtypeStruct`` leaves).
            micro_batch: one micro-batch (values or shapes).
        """
        key = arguments_key((params, micro_batch))
        if self._held is None or self._held[0] != key:
            p, micro = jax.tree.map(as_shape, (params, micro_batch))
            stage_params = [self.stage_params(p, s) for s in range(self.num_stages)]
            programs = compile_stages(self.functions, stage_params, micro, self._compile)
            self._held = (key, programs)
        return self._held[1]

    def accumulate(
        self, params: Any, micro_batches: Sequence[Any], zeros: jax.Array
    ) -> tuple[jax.Array, bool]:
        """One replica's weight update: the flat gradient-and-loss sum, and finiteness.

        Runs the passes in the strategy's schedule order, each stage's programs of the
        step's shapes (:meth:`compile`, looked up once per call, not once per pass); returns
        ``(acc, finite)`` shaped as ``make_micro_step``'s accumulator (``zeros`` gives its
        dtype and size).
        """
        if not micro_batches:
            raise PipelineError("Pipeline.accumulate: `micro_batches` is empty; pass at least one.")
        n, ga = self.num_stages, len(micro_batches)
        programs = self.compile(params, micro_batches[0])
        forward = [p.forward for p in programs]
        backward = [p.backward for p in programs]
        ps = [self.stage_params(params, s) for s in range(n)]
        inputs: dict[tuple[int, int], Any] = {}
        outputs: dict[tuple[int, int], Any] = {}
        grads_in: dict[tuple[int, int], Any] = {}
        acc: list[Any] = [None] * n
        loss_sum = None
        for _, s, kind, m in hardware.program_order(n, ga, self.strategy.strategy, self.ipus):
            if kind == "forward":
                x = micro_batches[m] if s == 0 else outputs.pop((s - 1, m))
                inputs[(s, m)] = x  # the stash: this stage's input of micro-batch m
                y = forward[s](ps[s], x)
                if s == n - 1:
                    loss = y.astype(zeros.dtype)
                    loss_sum = loss if loss_sum is None else loss_sum + loss
                else:
                    outputs[(s, m)] = y
                continue
            x = inputs.pop((s, m))
            dy = None if s == n - 1 else grads_in.pop((s, m))
            dp, dx = backward[s](ps[s], x, dy)
            acc[s] = dp if acc[s] is None else self._add(acc[s], dp)
            if s > 0:
                grads_in[(s - 1, m)] = list(dx)
        assert not inputs and not outputs and not grads_in, "pipeline schedule left work behind"
        assert loss_sum is not None, "the last stage ran no forward"
        grads: dict[str, Any] = {}
        for part in acc:  # a tied weight's gradients add up, in stage order
            for k, v in part.items():
                grads[k] = v if k not in grads else jax.tree.map(jnp.add, grads[k], v)
        total, finite = _flat_sum({k: grads[k] for k in params}, loss_sum, zeros.dtype)
        return total, bool(finite)


@functools.partial(jax.jit, static_argnums=2)
def _flat_sum(grads: Any, loss_sum: jax.Array, dtype: Any) -> tuple[jax.Array, jax.Array]:
    """The accumulator ``make_micro_step`` keeps (every gradient raveled, then the loss) and
    whether it is finite, as one program: taken op by op, each leaf's ravel and cast is a
    program of its own, compiled once per leaf shape and dispatched every step (on a small
    EfficientNet, 44 compiles and a third of the run)."""
    flat = [leaf.ravel().astype(dtype) for leaf in jax.tree.leaves(grads)]
    total = jnp.concatenate([*flat, loss_sum.reshape(1).astype(dtype)])
    return total, jnp.all(jnp.isfinite(total))


def make_pipeline(
    loss_fn: Callable[[Any, Any], jax.Array],
    options: Options,
    params: Any,
    *,
    compile: CompileFn | None = None,
) -> Pipeline | None:
    """The trainer's pipeline from ``Options.execution_strategy`` (None without one).

    The replica's IPUs come from ``options.layout`` (resolved once, from PopRun or given
    explicitly), so a pipeline built outside the launcher with an explicit layout checks its
    stages against that layout rather than against the environment. ``compile`` compiles
    its stages' programs (see :class:`Pipeline`).

    Raises:
        PipelineError: a strategy that is not one of PopTorch's, a loss that is not a
            ``BlockModel``, or a pipeline PopTorch or PopART would refuse for this layout.
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
        block_model(loss_fn),
        strategy,
        params,
        ipus_per_replica=options.layout.ipus_per_replica,
        gradient_accumulation=options.gradient_accumulation,
        recomputation=options.recomputation,
        compile=compile,
    )
