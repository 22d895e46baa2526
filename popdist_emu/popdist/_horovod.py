"""``horovod.torch`` over the job's instances: Horovod's ranks are PopRun's instances.

Graphcore's PopTorch applications use Horovod beside PopDist for host-side collectives between
the instances ``poprun`` starts: BERT, GPT-2 and ViT call ``hvd.init()`` whenever
``popdist.isPopdistEnvSet()``, broadcast the random seed and the initial weights from rank 0
(``hvd.broadcast``, ``hvd.broadcast_parameters(model.state_dict(), root_rank=0)``) and average
their printed metrics (``hvd.allreduce(t, average=...)``); the CNNs gather the instances'
timings (``hvd.allgather``) and add up sample counts (``hvd.allreduce(..., op=hvd.Sum)``,
``hvd.grouped_allreduce``). Here the ranks are PopDist's instances (``rank`` =
``getInstanceIndex``, ``size`` = ``getNumInstances``, ``local_rank``/``local_size`` the
instance's place on its host) and the collectives are GCL's over the transport the instances
already share (``gcl.all_reduce``/``all_gather``/``broadcast`` with one value per instance on
the private duplicate of COMM_WORLD), so their results are bit-identical on every instance.

Semantics follow Horovod's PyTorch API: every call needs ``init()`` first (``ValueError``
otherwise, as Horovod raises); ``allreduce`` averages by default; ``op=`` (``Average``,
``Sum``, ``Min``, ``Max``, ``Product``) supersedes the deprecated ``average=`` (``True`` is
``Average``, ``False`` ``Sum``; both given is a ``ValueError``); ``Average`` is the sum scaled
by ``postscale_factor / size`` as Horovod's ``ScaleBuffer`` scales it (an integer tensor's
product truncated, as its C++ cast does), ``prescale_factor`` scales each input first;
``allgather`` concatenates on the first dimension, which may differ between ranks;
``broadcast`` returns the root's value and ``broadcast_``/``broadcast_parameters`` write it in
place. Results are new tensors without autograd history (Horovod's are differentiable; the
applications only read them). ``Adasum``, process sets, compression and a communicator of
one's own are refused in one line. Outside ``poprun-emu`` there is one rank and every
collective returns its input's values; under ``--offline-mode`` only instance 0 runs and it
stands for every instance, as the offline simulation does: a sum is ``size`` times its value,
a gather ``size`` copies.

References:
    Horovod documentation, "horovod.torch" API (https://horovod.readthedocs.io/en/stable/
    api.html#module-horovod.torch) and horovod/horovod ``horovod/torch/mpi_ops.py``,
    ``horovod/torch/functions.py`` (``broadcast_parameters``), ``horovod/common/util.py``
    (``average`` against ``op``), ``horovod/common/message.h`` (``ReduceOp`` values),
    ``horovod/common/ops/collective_operations.cc`` (``ScaleBuffer``); PopRun/PopDist User
    Guide, "Python API"; graphcore/examples ``nlp/bert/pytorch/args.py``, ``utils.py``,
    ``vision/cnns/pytorch/utils/distributed.py`` (the calls).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from contract import InstanceEnvironment

if TYPE_CHECKING:
    import torch

# Horovod's ReduceOp values (horovod/common/message.h), as ``hvd.Average`` etc. give them.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_GCL_OPS = {Average: "add", Sum: "add", Min: "min", Max: "max", Product: "mul"}
_OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}

__all__ = [
    "Average",
    "Max",
    "Min",
    "Product",
    "Sum",
    "allgather",
    "allreduce",
    "broadcast",
    "broadcast_",
    "broadcast_parameters",
    "grouped_allreduce",
    "init",
    "is_initialized",
    "local_rank",
    "local_size",
    "rank",
    "size",
]

_STATE = {"initialized": False}


def init(comm: object = None, process_sets: object = None) -> None:
    """Starts Horovod: here, marks it started (the instances' transport connects on first use).

    Raises:
        ValueError: a communicator or process sets were given (the job's instances are the
            only ranks).
    """
    if comm is not None or process_sets is not None:
        raise ValueError(
            "hvd.init(comm=..., process_sets=...): popdist-emu's Horovod runs over all the "
            "job's instances only; call hvd.init() without arguments."
        )
    _STATE["initialized"] = True


def is_initialized() -> bool:
    """Whether :func:`init` was called."""
    return _STATE["initialized"]


def _view() -> InstanceEnvironment:
    if not _STATE["initialized"]:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    return InstanceEnvironment.from_environ()


def rank() -> int:
    """This instance's index among the job's (PopDist's ``getInstanceIndex``)."""
    return _view().instance


def size() -> int:
    """The job's instances (PopDist's ``getNumInstances``)."""
    return _view().layout.num_instances


def local_rank() -> int:
    """This instance's index among those of its host."""
    return _view().local_instance_index


def local_size() -> int:
    """The instances on this instance's host."""
    return _view().layout.instances_per_host


def _peers() -> tuple[str, int]:
    """How the collectives run: ``("alone", 1)``, ``("offline", size)`` (instance 0 stands for
    all) or ``("gcl", size)``."""
    view = _view()
    n = view.layout.num_instances
    if n == 1:
        return "alone", 1
    return ("offline" if view.offline else "gcl"), n


def _op_of(op: int | None, average: bool | None) -> int:
    """Horovod's choice between ``op`` and the deprecated ``average`` (Average by default)."""
    if op is not None:
        if average is not None:
            raise ValueError(
                "The op parameter supersedes average. Please provide only one of them."
            )
        if op == Adasum:
            raise ValueError(
                "hvd.Adasum is not provided by popdist-emu's Horovod (an adaptive summation "
                "of gradients, not a reduction GCL has); use op=hvd.Sum or hvd.Average."
            )
        if op not in _GCL_OPS:
            raise ValueError(
                f"op={op!r} is not one of Horovod's reductions: pass hvd.Average, hvd.Sum, "
                f"hvd.Min, hvd.Max or hvd.Product."
            )
        return op
    if average is not None:
        warnings.warn(
            "Parameter `average` has been replaced with `op` and will be removed in v1.0",
            DeprecationWarning,
            stacklevel=3,
        )
        return Average if average else Sum
    return Average


def _unsupported(name: str, value: object, fix: str) -> None:
    if value is not None:
        raise ValueError(f"hvd: {name}={value!r} is not supported by popdist-emu's Horovod; {fix}.")


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"hvd: expected a torch.Tensor, got {type(tensor).__name__}; wrap the value, "
            f"e.g. torch.tensor([value])."
        )
    host = tensor.detach().cpu()
    if host.dtype == torch.bfloat16:  # numpy has no bfloat16: carried as float32
        host = host.float()
    return np.asarray(host.contiguous().numpy())  # keeps a 0-d tensor 0-d


def _to_torch(array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.from_numpy(np.array(array)).to(dtype=like.dtype, device=like.device)


def _reduce(arrays: list[np.ndarray], op: int) -> list[np.ndarray]:
    """Each array reduced over the instances with ``op`` (Average as Sum), in one collective."""
    how, n = _peers()
    if how == "alone":
        return arrays
    if how == "offline":
        if op in (Sum, Average):
            return [a * np.asarray(n, a.dtype) for a in arrays]
        return [a**n for a in arrays] if op == Product else arrays
    import gcl

    return list(gcl.all_reduce([arrays], op=_GCL_OPS[op])[0])


def _scale(array: np.ndarray, factor: float) -> np.ndarray:
    """``array * factor`` in its own dtype, as Horovod's ``ScaleBuffer`` computes it."""
    if factor == 1.0:
        return array
    if array.dtype.kind in "iub":
        return np.trunc(array.astype(np.float64) * factor).astype(array.dtype)
    compute = np.float64 if array.dtype == np.float64 else np.float32
    return (array.astype(compute) * compute(factor)).astype(array.dtype)


def grouped_allreduce(
    tensors: Sequence[torch.Tensor],
    average: bool | None = None,
    name: str | None = None,
    compression: object = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: object = None,
) -> list[torch.Tensor]:
    """Reduces every tensor over the instances in one collective (module docstring).

    Returns:
        One new tensor per input, of its shape and dtype.
    """
    del name
    _unsupported("compression", compression, "leave it out (no compression on the host)")
    _unsupported("process_set", process_set, "leave it out (all instances)")
    return _allreduce(list(tensors), _op_of(op, average), prescale_factor, postscale_factor)


def allreduce(
    tensor: torch.Tensor,
    average: bool | None = None,
    name: str | None = None,
    compression: object = None,
    op: int | None = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: object = None,
) -> torch.Tensor:
    """``tensor`` reduced over the instances: averaged unless ``op``/``average`` say otherwise.

    Returns:
        A new tensor of ``tensor``'s shape and dtype, the same on every instance.
    """
    del name
    _unsupported("compression", compression, "leave it out (no compression on the host)")
    _unsupported("process_set", process_set, "leave it out (all instances)")
    return _allreduce([tensor], _op_of(op, average), prescale_factor, postscale_factor)[0]


def _allreduce(
    inputs: list[torch.Tensor], op: int, prescale_factor: float, postscale_factor: float
) -> list[torch.Tensor]:
    arrays = [_scale(_to_numpy(t), prescale_factor) for t in inputs]
    reduced = _reduce(arrays, op)
    post = postscale_factor / (size() if op == Average else 1)
    return [_to_torch(_scale(r, post), t) for r, t in zip(reduced, inputs, strict=True)]


def allgather(tensor: torch.Tensor, name: str | None = None, process_set: object = None) -> Any:
    """The instances' tensors concatenated on the first dimension, in rank order.

    The first dimension may differ between instances; the others and the dtype must agree.

    Raises:
        ValueError: a 0-d tensor (nothing to concatenate on), or the instances disagree.
    """
    import torch

    del name
    _unsupported("process_set", process_set, "leave it out (all instances)")
    array = _to_numpy(tensor)
    if array.ndim == 0:
        raise ValueError(
            "hvd.allgather: the tensor is 0-d and allgather concatenates on the first "
            "dimension; pass tensor.reshape(1)."
        )
    how, n = _peers()
    if how != "gcl":
        copies = 1 if how == "alone" else n
        return _to_torch(np.concatenate([array] * copies), tensor)
    import gcl

    me = rank()
    rows = np.zeros(n, np.int64)
    rows[me] = array.shape[0]
    counts = gcl.all_reduce([rows], op="add")[0]
    most = int(counts.max())
    padded = np.zeros((most, *array.shape[1:]), array.dtype)
    padded[: array.shape[0]] = array
    if padded.size == 0:
        return _to_torch(np.zeros((0, *array.shape[1:]), array.dtype), tensor)
    like = np.broadcast_to(np.zeros((), array.dtype), (n * padded.size,))
    full = gcl.all_gather([padded.reshape(-1)], like=like)[0].reshape(n, *padded.shape)
    parts = [full[r, : int(counts[r])] for r in range(n)]
    return torch.cat([_to_torch(p, tensor) for p in parts])


def _broadcast_arrays(arrays: list[np.ndarray], root_rank: int) -> list[np.ndarray]:
    how, n = _peers()
    if isinstance(root_rank, bool) or not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError(
            f"hvd.broadcast: root_rank={root_rank!r} is not a rank of this job; pass an "
            f"integer in [0, {n}) (hvd.size())."
        )
    if how != "gcl" or not arrays:
        return arrays
    import gcl

    return list(gcl.broadcast([arrays], root=root_rank)[0])


def broadcast(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: object = None
) -> torch.Tensor:
    """A new tensor with the value ``tensor`` has on rank ``root_rank``; the input unchanged."""
    del name
    _unsupported("process_set", process_set, "leave it out (all instances)")
    return _to_torch(_broadcast_arrays([_to_numpy(tensor)], root_rank)[0], tensor)


def broadcast_(
    tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: object = None
) -> torch.Tensor:
    """Writes rank ``root_rank``'s value into ``tensor`` in place and returns it."""
    import torch

    value = broadcast(tensor, root_rank, name=name, process_set=process_set)
    with torch.no_grad():
        tensor.copy_(value)
    return tensor


def broadcast_parameters(params: object, root_rank: int) -> None:
    """Writes rank ``root_rank``'s parameters into every instance's, in place, in one
    collective: ``model.state_dict()`` (sorted by name, as Horovod sorts it),
    ``model.named_parameters()`` or ``model.parameters()`` as a list.

    Raises:
        ValueError: ``params`` is neither a dict nor a list.
    """
    import torch

    if isinstance(params, dict):
        tensors = [p for _, p in sorted(params.items())]
    elif isinstance(params, list):
        tensors = [p[1] if isinstance(p, tuple) else p for p in params]
    else:
        raise ValueError(
            f"hvd.broadcast_parameters: invalid params of type {type(params).__name__}; pass "
            f"model.state_dict() or list(model.named_parameters())."
        )
    values = _broadcast_arrays([_to_numpy(t) for t in tensors], root_rank)
    with torch.no_grad():
        for t, v in zip(tensors, values, strict=True):
            t.copy_(_to_torch(v, t))
