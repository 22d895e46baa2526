"""What a PopTorch call returns: each local replica's outputs, laid out by the output mode.

PopTorch returns the outputs of this instance's replicas only (its ``replicationFactor``),
never a mean over replicas or instances: every output the forward returns, the loss
included, is an anchor of PopART's, and PopART hands the host, per anchor, the values of
the micro-batches the output mode names, laid out ``[device_iterations,
gradient_accumulation, replicas, *output]`` (outermost first, dimensions of size 1
dropped), which PopTorch joins on the output's first dimension:

- ``All``: every micro-batch's (``device_iterations x gradient_accumulation x replicas``);
- ``EveryN(n)``: those of device iterations ``n-1, 2n-1, ...`` (every micro-batch of each);
- ``Final``: the last micro-batch's of each replica;
- ``Sum``: each replica's sum over its device iterations and accumulated micro-batches;
- ``Default``: ``Final`` for a training model, ``All`` for an inference model.

So a loss (a scalar per micro-batch) comes back as ``[count]`` (a scalar when the count is
1), and an output of shape ``[m, *rest]`` as ``[count * m, *rest]``, ``count`` being the
micro-batches returned per replica times the replicas (1 per replica for Final and Sum).

References:
    PopTorch User Guide, "Efficient data batching" (``output`` and ``loss`` are those "of the
    final batch of each replica" by default; ``anchorReturnType``: ``Sum`` for metrics over
    all batches), and "Options" (``outputMode(output_mode, output_return_period)``);
    https://docs.graphcore.ai/projects/poptorch-user-guide/en/latest/batching.html.
    PopART C++ API, ``popart::AnchorReturnTypeId`` (the buffer shapes of Final, EveryN, All
    and Sum), https://github.com/graphcore/popart (``willow/include/popart/dataflow.hpp``).
    PopTorch's tests of the output modes (``tests/batching_test.py``, graphcore/poptorch):
    EveryN(5) of 10 iterations returns iterations 4 and 9; Sum sums over the iterations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.typing import ArrayLike

from popdist_emu.poptorch._arrays import LaidOutBatch

# ``forward(weights, micro_batch, first_index) -> (outputs, buffers)``, jitted.
Forward = Callable[[dict[str, jax.Array], tuple[jax.Array, ...], ArrayLike], tuple[Any, Any]]


class OutputMode(NamedTuple):
    """A resolved output mode: ``name`` is ``"all"``, ``"final"``, ``"everyn"`` or ``"sum"``;
    ``period`` is EveryN's ``n`` (1 for the others)."""

    name: str
    period: int = 1


def resolve_mode(name: str | None, period: int, *, training: bool, iterations: int) -> OutputMode:
    """The mode a model returns by: ``Default`` (or unset) is Final for a training model and
    All for an inference model (PopTorch's defaults).

    Raises:
        ValueError: an EveryN period that does not divide the device iterations.
    """
    if name in (None, "default"):
        return OutputMode("final" if training else "all")
    if name == "everyn" and iterations % period:
        raise ValueError(
            f"outputMode(EveryN, {period}): the period must divide the {iterations} device "
            f"iterations of a call; pick a divisor of {iterations} or change deviceIterations."
        )
    return OutputMode(name, period if name == "everyn" else 1)


def returned_micro_batches(
    mode: OutputMode, iterations: int, accumulation: int
) -> list[tuple[int, int]]:
    """The ``(device iteration, accumulated micro-batch)`` pairs whose outputs the host gets
    (summed for Sum), in the order PopART lays them out."""
    if mode.name == "final":
        return [(iterations - 1, accumulation - 1)]
    if mode.name == "everyn":
        kept = range(mode.period - 1, iterations, mode.period)
    else:
        kept = range(iterations)
    return [(d, a) for d in kept for a in range(accumulation)]


def outputs_per_step(mode: OutputMode, iterations: int, accumulation: int) -> int:
    """Micro-batches per call whose outputs each replica copies to the host: Sum adds them up
    on the device and copies once, as Final does."""
    if mode.name in ("final", "sum"):
        return 1
    return len(returned_micro_batches(mode, iterations, accumulation))


def host_layout(parts: Sequence[Any], mode: OutputMode) -> Any:
    """The outputs the host gets, from ``parts``: one tree per returned micro-batch (in
    :func:`returned_micro_batches`' order) whose leaves are ``[replicas, *output]``."""

    def leaf(*values: ArrayLike) -> np.ndarray:
        stacked = np.stack([np.asarray(v) for v in values])  # [micro-batches, replicas, ...]
        if mode.name == "sum":
            total = stacked.sum(axis=0, keepdims=True)
            stacked = total if stacked.dtype == np.bool_ else total.astype(stacked.dtype)
        count, shape = stacked.shape[0] * stacked.shape[1], stacked.shape[2:]
        if not shape:
            return stacked.reshape(count) if count > 1 else stacked.reshape(())
        return stacked.reshape(count * shape[0], *shape[1:])

    return jax.tree.map(leaf, *parts)


def from_step(outputs: Any, mode: OutputMode) -> Any:
    """The host's outputs from a step's, leaves ``[iterations, accumulation, replicas, ...]``
    (the Trainer's ``has_aux`` outputs)."""
    first = jax.tree.leaves(outputs)[0]
    iterations, accumulation = first.shape[:2]
    pairs = returned_micro_batches(mode, iterations, accumulation)
    return host_layout([jax.tree.map(lambda o, d=d, a=a: o[d, a], outputs) for d, a in pairs], mode)


def from_records(
    records: Mapping[tuple[int, int, int], Any],
    mode: OutputMode,
    *,
    iterations: int,
    accumulation: int,
    replicas: int,
) -> Any:
    """The host's outputs from each micro-batch's, by ``(iteration, micro-batch, replica)``."""
    parts = []
    for d, a in returned_micro_batches(mode, iterations, accumulation):
        each = [records[d, a, k] for k in range(replicas)]
        parts.append(jax.tree.map(lambda *ks: np.stack([np.asarray(v) for v in ks]), *each))
    return host_layout(parts, mode)


class IterationOutputs:
    """The outputs of the micro-batches a call returns, from the module's forward with the
    weights of their device iteration: for a step that cannot return them itself (a pipeline
    or sharded blocks run the loss stage by stage).

    Args:
        returned: the ``(iteration, micro-batch)`` pairs whose outputs are kept.
        replicas: this instance's replicas.
    """

    def __init__(self, returned: Sequence[tuple[int, int]], replicas: int) -> None:
        self.returned = frozenset(returned)
        self.replicas = replicas
        self.outputs: dict[tuple[int, int, int], Any] = {}

    def each_iteration(
        self,
        forward: Forward,
        weights_of: Callable[[dict[str, jax.Array]], dict[str, jax.Array]],
        batch: LaidOutBatch,
    ) -> Callable[[int, dict[str, jax.Array]], None]:
        """What the step calls at the start of device iteration ``d`` with its weights (the
        signature of ``ReplicaBuffers.each_iteration``).

        Args:
            forward: the module's jitted forward.
            weights_of: the module's weights for the step's parameters.
            batch: the call's batch, laid out.
        """

        def run(d: int, params: dict[str, jax.Array]) -> None:
            if d == 0:
                self.outputs = {}
            weights = weights_of(params)
            for k in range(self.replicas):
                for dd, a in sorted(self.returned):
                    if dd != d:
                        continue
                    micro, first = batch.micro_batch(d, a, k)
                    self.outputs[d, a, k] = forward(weights, micro, first)[0]
            # The update reuses the parameters' memory: the forwards read them first.
            jax.block_until_ready(self.outputs)

        return run


def micro_batch_forwards(
    run_state: Callable[[Any, tuple[jax.Array, ...], ArrayLike], tuple[Any, Any]],
    weights: dict[str, jax.Array],
    micro: tuple[np.ndarray, ...],
    first: ArrayLike,
) -> tuple[Any, Any]:
    """An inference call: ``run_state(weights, micro_batch, first_index)`` on each
    micro-batch of ``micro`` (``[iterations, 1, replicas, m, ...]``) in turn, keyed by its
    first sample's index in the call (``first`` the call's): the outputs ``[iterations, 1,
    replicas, ...]`` and the buffers the last one left (there is one where they change)."""
    shape, size = micro[0].shape[:3], micro[0].shape[3]
    flat = tuple(a.reshape(-1, *a.shape[3:]) for a in micro)

    def one(i: jax.Array) -> tuple[Any, Any]:
        return run_state(weights, tuple(a[i] for a in flat), first + i * size)

    out, buffers = jax.lax.map(one, jax.numpy.arange(flat[0].shape[0], dtype=np.int32))
    out = jax.tree.map(lambda o: o.reshape(*shape, *o.shape[1:]), out)
    return out, jax.tree.map(lambda b: b[-1], buffers)
