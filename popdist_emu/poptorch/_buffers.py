"""Buffers a module's forward changes: BatchNorm's running statistics and the like.

PopTorch keeps a module's buffers on the IPU and lets the forward change them in place:
in training, BatchNorm updates its running mean and variance from every micro-batch, one
micro-batch after the other, and the host sees the result when the weights are copied back.
With replicas, each replica would change its own copy; PopTorch refuses that unless the
program says it tolerates buffers out of sync between replicas
(``Options.broadcastBuffers(False)``), and then each replica keeps its own.

Here the module's forward runs as a pure JAX function of ``(weights, inputs)`` that also
returns the buffers as the forward left them (:func:`module_function`), so a changed buffer
is a new value and an unchanged one is the very input (:func:`changed_buffers` reads that
off the traced program). torchax's batch norm computes new running statistics and drops
them; :func:`use_pytorch_batch_norm` replaces it with PyTorch's semantics (running variance
unbiased, updated in place), checked against PyTorch in the tests.

The training step keeps the buffers the loss reads fixed during a step, so buffers that
the forward changes must not feed the loss (BatchNorm in training normalises with the
micro-batch's own statistics; :func:`buffers_read_by` checks it on the traced loss).

References:
    PopTorch User Guide, "Buffers" (buffers changed in the forward; ``broadcastBuffers``);
    PyTorch documentation, ``torch.nn.BatchNorm2d`` (running statistics with ``momentum``,
    the unbiased variance); Ioffe and Szegedy, "Batch Normalization" (2015),
    https://arxiv.org/abs/1502.03167.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias, cast

import jax
import numpy as np
import torch
import torchax
from jax.typing import ArrayLike
from torchax.interop import JittableModule

from popdist_emu.poptorch._arrays import LaidOutBatch
from popdist_emu.poptorch._loss_output import traced_forward

_INSTALLED: list[bool] = []

# ``fn(weights, micro_batch) -> (outputs, buffers)``: the module's forward as a pure function
# (its outputs are whatever structure the forward returns).
ModuleFunction: TypeAlias = Callable[
    [dict[str, jax.Array], tuple[jax.Array, ...]], tuple[Any, dict[str, jax.Array]]
]


def _batch_norm(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """aten's batch norm as PyTorch computes it, running statistics updated in place (a
    half-precision input's statistics in float32, its output in half, as PyTorch does): both
    ``native_batch_norm`` (whose last three arguments have these defaults) and
    ``_native_batch_norm_legit``."""
    dtype = input.dtype
    if dtype in (torch.float16, torch.bfloat16):
        input = input.float()
    dims = [0, *range(2, input.ndim)]
    shape = [1, -1] + [1] * (input.ndim - 2)
    if training:
        mean = input.mean(dims)
        var = ((input - mean.reshape(shape)) ** 2).mean(dims)
        if running_mean is not None and running_var is not None:
            count = input.numel() // input.shape[1]
            unbiased = var * (count / max(count - 1, 1))
            with torch.no_grad():
                running_mean.copy_((1 - momentum) * running_mean + momentum * mean)
                running_var.copy_((1 - momentum) * running_var + momentum * unbiased)
    else:
        # Eval mode reads the running statistics (a norm without them runs in training mode).
        assert running_mean is not None and running_var is not None
        mean, var = running_mean, running_var
    rstd = torch.rsqrt(var + eps)
    out = (input - mean.reshape(shape)) * rstd.reshape(shape)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    empty = input.new_zeros(0)
    return out.to(dtype), mean if training else empty, rstd if training else empty


def use_pytorch_batch_norm() -> None:
    """Makes torchax's default environment run batch norm as PyTorch does (once)."""
    if _INSTALLED:
        return
    env = torchax.default_env()
    env.override_op_definition(torch.ops.aten.native_batch_norm.default, _batch_norm)
    env.override_op_definition(torch.ops.aten._native_batch_norm_legit.default, _batch_norm)
    _INSTALLED.append(True)


def module_function(
    model: torch.nn.Module,
) -> tuple[dict[str, jax.Array], ModuleFunction, list[str]]:
    """``model`` as a pure function of its weights: ``fn(weights, args) -> (outputs,
    buffers)``, as ``torchax.extract_jax`` gives it, with the buffers the forward left.

    Returns:
        ``(weights, fn, buffer_names)``: the parameters and buffers by name (tied
        parameters once), the function, and the buffers' names.
    """
    use_pytorch_batch_norm()
    env = torchax.default_env()
    module = JittableModule(model)
    # torchax's dicts of the module's tensors (their names shadow nn.Module's methods).
    buffers = cast(dict[str, torch.Tensor], module.buffers)
    params = cast(dict[str, torch.Tensor], module.params)
    weights = env.t2j_copy({**buffers, **params})
    names = list(buffers)

    def fn(
        states: dict[str, jax.Array], args: tuple[jax.Array, ...]
    ) -> tuple[Any, dict[str, jax.Array]]:
        params = {k: states[k] for k in module.params}
        buffers = {k: states[k] for k in names}
        params, buffers, args = env.j2t_iso((params, buffers, args))
        # The forward runs on the device, as PopTorch traces it: a tensor it makes from
        # nothing (``torch.rand`` for mixup coefficients, ``torch.ones`` constants) is
        # made there too, a torchax tensor drawn from the call's key, not a CPU tensor.
        with env, torch.device("jax"):
            out = traced_forward(lambda: module.functional_call("forward", params, buffers, *args))
        return env.t2j_iso((out, buffers))

    return weights, fn, names


def module_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's tensors by torchax's names: parameters, buffers, and the plain tensor
    attributes torchax also takes as buffers (Graphcore's ViT keeps its input normalisation's
    constants so, set before ``Module.__init__``)."""
    tensors = {
        **dict(model.named_parameters(remove_duplicate=False)),
        **dict(model.named_buffers(remove_duplicate=False)),
    }
    for prefix, module in model.named_modules(remove_duplicate=False):
        for key, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                tensors.setdefault(f"{prefix}.{key}" if prefix else key, value)
    return tensors


def changed_buffers(
    fn: ModuleFunction,
    weights: dict[str, jax.Array],
    args: tuple[np.ndarray | jax.Array, ...],
    names: list[str],
) -> list[str]:
    """The buffers ``fn`` changes: those it returns as anything but their input."""
    if not names:
        return []
    fixed = {k: v for k, v in weights.items() if k not in names}

    def buffers_out(
        buffers: dict[str, jax.Array], args: tuple[jax.Array, ...]
    ) -> dict[str, jax.Array]:
        return fn({**fixed, **buffers}, args)[1]

    closed = jax.make_jaxpr(buffers_out)({k: weights[k] for k in names}, _arrays(args))
    order = sorted(names)  # a dict's leaves, in key order, come first
    inputs, outputs = closed.jaxpr.invars, closed.jaxpr.outvars
    return [name for name, i, o in zip(order, inputs, outputs, strict=False) if o is not i]


def buffers_read_by(
    loss: Callable[[dict[str, jax.Array], tuple[jax.Array, ...]], jax.Array],
    buffers: dict[str, jax.Array],
    args: tuple[np.ndarray | jax.Array, ...],
) -> list[str]:
    """The names in ``buffers`` that the value of ``loss(buffers, args)`` depends on.

    Read off the traced program backwards from its result: an operation whose results
    are needed needs all of its operands (a nested program counts as one operation).
    """
    closed = jax.make_jaxpr(loss)(buffers, _arrays(args))
    needed = {id(v) for v in closed.jaxpr.outvars}
    for eqn in reversed(closed.jaxpr.eqns):
        if any(id(v) in needed for v in eqn.outvars):
            needed.update(id(v) for v in eqn.invars)
    order = sorted(buffers)  # the buffers' leaves come first
    return [name for name, v in zip(order, closed.jaxpr.invars, strict=False) if id(v) in needed]


def _arrays(args: tuple[np.ndarray | jax.Array, ...]) -> tuple[jax.Array, ...]:
    """Host arrays as JAX arrays, so the trace takes them as inputs rather than constants."""
    return jax.tree.map(jax.numpy.asarray, args)


def describe_buffers(names: Sequence[str], shown: int = 2, kinds_shown: int = 3) -> str:
    """Buffer names for a one-line error: up to four as they are, more as counts per module
    (a ResNet's BatchNorms: "159 buffers of 53 modules: 3 each (running_mean, running_var,
    num_batches_tracked) in bn1, layer1.0.bn1 and 51 more"), not every name.

    Args:
        names: the buffers' names, as ``named_buffers`` gives them.
        shown: modules named per kind of module (the same buffer names).
        kinds_shown: kinds of module described; the rest are counted.
    """
    if len(names) <= 4:
        return ", ".join(names)
    by_module: dict[str, list[str]] = {}
    for name in names:
        module, _, leaf = name.rpartition(".")
        by_module.setdefault(module or "the model", []).append(leaf)
    kinds: dict[tuple[str, ...], list[str]] = {}
    for module, held in by_module.items():
        kinds.setdefault(tuple(held), []).append(module)
    parts = []
    for leaves, modules in list(kinds.items())[:kinds_shown]:
        more = f" and {len(modules) - shown} more" if len(modules) > shown else ""
        each = f"{len(leaves)} each" if len(modules) > 1 else str(len(leaves))
        parts.append(f"{each} ({', '.join(leaves)}) in {', '.join(modules[:shown])}{more}")
    if len(kinds) > kinds_shown:
        parts.append(f"and {len(kinds) - kinds_shown} other kind(s) of module")
    return f"{len(names)} buffers of {len(by_module)} modules: " + "; ".join(parts)


# The modules whose buffers PopTorch lets change under replication whatever
# ``broadcastBuffers`` says (its ``_impl.BUFFERS_CAN_CHANGE``): each replica keeps its own
# running statistics, as Graphcore's CNN training (ResNet-50 on 16 replicas) relies on.
_BUFFERS_CAN_CHANGE = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)


def replica_local_buffers(model: torch.nn.Module) -> set[str]:
    """The buffers of ``model``'s BatchNorm modules, by ``named_buffers``' names."""
    return {
        f"{prefix}.{name}" if prefix else name
        for prefix, module in model.named_modules()
        if isinstance(module, _BUFFERS_CAN_CHANGE)
        for name, _ in module.named_buffers(recurse=False)
    }


def check_changing_buffers(
    changing: list[str],
    read: list[str],
    total_replicas: int,
    broadcast_buffers: bool,
    *,
    replica_local: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Refuses buffers changed in training that PopTorch or the emulator cannot keep.

    Args:
        changing: the buffers the forward changes.
        read: those of them the loss reads.
        total_replicas: the job's replicas.
        broadcast_buffers: ``Options.broadcastBuffers``.
        replica_local: buffers PopTorch lets each replica change (BatchNorm's).

    Raises:
        ValueError: several replicas under PopTorch's default ``broadcastBuffers`` (PopTorch
            refuses them too, BatchNorm's apart), or a loss that reads a buffer the forward
            changes.
    """
    changing = [name for name in changing if name not in replica_local]
    if total_replicas > 1 and broadcast_buffers and changing:
        raise ValueError(
            f"poptorch: the forward changes buffers ({describe_buffers(changing)}) and PopTorch "
            f"does not support broadcasting buffers between replicas; if the model "
            f"tolerates buffers out of sync between replicas, call "
            f"options.broadcastBuffers(False)."
        )
    if read:
        raise ValueError(
            f"poptorch: the loss reads buffers that its forward also changes "
            f"({describe_buffers(read)}); popdist-emu keeps buffers fixed within a step and "
            f"records their changes beside it (as BatchNorm's running statistics need), "
            f"so compute the loss without them."
        )


def check_inference_buffers(changing: list[str], device_iterations: int, replicas: int) -> None:
    """Refuses an inference model that changes buffers over several micro-batches a call.

    Raises:
        ValueError: more than one replica or device iteration.
    """
    if device_iterations * replicas > 1:
        raise ValueError(
            f"poptorch.inferenceModel: the forward changes buffers ({describe_buffers(changing)}); "
            f"popdist-emu runs such a model with one replica and one device iteration only "
            f"so far."
        )


class ReplicaBuffers:
    """Each local replica's copy of the buffers training changes.

    Args:
        buffers: the changed buffers' values before training, by name.
        replicas: this instance's replicas.
    """

    def __init__(self, buffers: dict[str, jax.Array], replicas: int) -> None:
        self.per_replica = [dict(buffers) for _ in range(replicas)]
        # The latest call's outputs, by (device iteration, micro-batch, replica).
        self.outputs: dict[tuple[int, int, int], Any] = {}

    @property
    def first(self) -> dict[str, jax.Array]:
        """The first local replica's buffers: what the host sees."""
        return self.per_replica[0]

    def each_iteration(
        self,
        forward: Callable[
            [dict[str, jax.Array], tuple[jax.Array, ...], ArrayLike],
            tuple[Any, dict[str, jax.Array]],
        ],
        weights_of: Callable[[dict[str, jax.Array]], dict[str, jax.Array]],
        batch: LaidOutBatch,
    ) -> Callable[[int, dict[str, jax.Array]], None]:
        """What the step calls at each device iteration: every local replica's buffers
        through its micro-batches, in order, from the iteration's weights; each
        micro-batch's outputs are kept (:meth:`combined_outputs`).

        Args:
            forward: ``forward(weights, micro_batch, first_index) -> (outputs, buffers)``,
                jitted.
            weights_of: the module's weights for the step's parameters (with its other
                buffers).
            batch: the call's batch, laid out.
        """
        accumulation = batch.leaves[0].shape[1]

        def run(d: int, params: dict[str, jax.Array]) -> None:
            if d == 0:
                self.outputs = {}
            weights = weights_of(params)
            for k, buffers in enumerate(self.per_replica):
                for a in range(accumulation):
                    micro, first = batch.micro_batch(d, a, k)
                    outputs, out = forward({**weights, **buffers}, micro, first)
                    self.outputs[d, a, k] = outputs
                    buffers = {n: out[n] for n in buffers}
                self.per_replica[k] = buffers
            # The update reuses the parameters' memory: the passes read them first.
            jax.block_until_ready(self.per_replica)

        return run

    def combined_outputs(self) -> Any:
        """The latest call's outputs as one combined batch (micro-batches in the batch's
        order, ``[iterations, accumulation, replicas]``; a scalar output is the last)."""
        parts = [self.outputs[key] for key in sorted(self.outputs)]

        def combine(*values: jax.Array) -> np.ndarray:
            arrays = [np.array(v) for v in values]
            return np.concatenate(arrays) if arrays[-1].ndim else arrays[-1]

        return jax.tree.map(combine, *parts)


def write_buffers(model: torch.nn.Module, buffers: dict[str, jax.Array]) -> None:
    """Copies buffers into the torch module (PopTorch's copy of the weights to the host)."""
    named = dict(model.named_buffers())
    with torch.no_grad():
        for name, value in buffers.items():
            named[name].copy_(torch.from_numpy(np.array(value)))


@contextlib.contextmanager
def in_mode(model: torch.nn.Module, training: bool) -> Iterator[None]:
    """``model`` in training or eval mode for a block, then as it was: a training and an
    inference model of one module each trace it in their own mode, as PopTorch compiles
    each wrapper in its own. A module already in that mode is left alone (no walk setting
    every submodule's flag twice a call: a tenth of a small model's step)."""
    if all(m.training == training for m in model.modules()):
        yield
        return
    was = model.training
    model.train(training)
    try:
        yield
    finally:
        model.train(was)


def check_modules(model: torch.nn.Module) -> None:
    """Refuses, in one line, norms whose running statistics the emulator cannot keep.

    Raises:
        ValueError: a BatchNorm with ``momentum=None`` (a cumulative average computed from
            its batch count in Python), or an InstanceNorm that tracks running statistics.
    """
    for name, module in model.named_modules():
        tracks = getattr(module, "track_running_stats", False)
        batch_norm = isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
        if batch_norm and tracks and module.momentum is None:
            raise ValueError(
                f"poptorch: {name or 'the model'} is a BatchNorm with momentum=None (a "
                f"cumulative average), which popdist-emu does not run; give it a "
                f"momentum, e.g. 0.1."
            )
        if isinstance(module, torch.nn.modules.instancenorm._InstanceNorm) and tracks:
            raise ValueError(
                f"poptorch: {name or 'the model'} is an InstanceNorm with "
                f"track_running_stats=True, whose statistics popdist-emu does not keep; "
                f"construct it with track_running_stats=False."
            )
