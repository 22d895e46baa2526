"""Check that every replica entered the same collective with the same kind of data.

Local replicas are compared directly; instances compare a fixed-size digest of their call
(collective, options, local replica count, tree structure, shapes, dtypes) with one small
Allgather, and only on a mismatch exchange the full text to say which replica disagreed.
Without this, a shape mismatch would deadlock or silently mix unrelated bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from gcl._pytree import TreeDef, flatten
from gcl._transport import Transport


class Call(NamedTuple):
    """A validated collective call on this instance."""

    leaves: list[list[np.ndarray]]  # per local replica, per leaf
    treedef: TreeDef
    num_replicas: int
    num_instances: int
    instance: int
    local: int  # replicas per instance


def signature(treedef: TreeDef, leaves: Sequence[np.ndarray]) -> str:
    """Tree structure, shapes and dtypes as deterministic text."""
    arrays = ", ".join(f"{a.dtype.name}{list(a.shape)}" for a in leaves)
    return f"tree {treedef.describe()} with leaves [{arrays}]"


def _flatten_replicas(
    values: Sequence[object], what: str, arg: str
) -> tuple[list, TreeDef, list[str]]:
    if (
        isinstance(values, dict)
        or not isinstance(values, Sequence)
        or isinstance(values, str | bytes)
    ):
        raise TypeError(
            f"gcl.{what}: `{arg}` must be a sequence with one entry per local replica, got "
            f"{type(values).__name__}; wrap a single replica's value in a list: [{arg}]."
        )
    if len(values) == 0:
        raise ValueError(
            f"gcl.{what}: `{arg}` is empty: expected one entry per local replica (at least "
            f"one); pass [value] for a single replica."
        )
    flat = [flatten(v) for v in values]
    sigs = [signature(t, leaves) for leaves, t in flat]
    return [leaves for leaves, _ in flat], flat[0][1], sigs


def validate(
    values: Sequence[object],
    transport: Transport | None,
    what: str,
    options: str,
    deadline: float,
    arg: str = "values",
) -> Call:
    """Flatten every local replica's value and check all replicas agree.

    Args:
        values: one pytree per local replica.
        transport: the instances' transport, or None to run on this process alone.
        what: the collective's name.
        options: the call's options as text (op, method, group, ...), which must agree too.
        deadline: monotonic deadline for the digest exchange.
        arg: the argument's name, for messages.

    Raises:
        ValueError: a replica's structure, shapes or dtypes (or the call's options or local
            replica count) differ from global replica 0's; the message names the replica.
    """
    leaves, treedef, sigs = _flatten_replicas(values, what, arg)
    local = len(values)
    n, me = (1, 0) if transport is None else (transport.size, transport.rank)
    for k in range(1, local):
        if sigs[k] != sigs[0]:
            raise ValueError(
                f"gcl.{what}: global replica {me * local + k} (local entry {k} of `{arg}`) has "
                f"{sigs[k]}, but replica {me * local} has {sigs[0]}: every replica must pass "
                f"the same structure, shapes and dtypes."
            )
    text = f"{what}({options}) with {local} local replicas; {sigs[0]}"
    if transport is not None and n > 1:
        transport.begin(deadline, what)
        digest = hashlib.sha256(text.encode()).digest()
        digests = transport.allgather_digest(digest, deadline, what)
        if any(d != digests[0] for d in digests):
            texts = [t.decode() for t in transport.allgather_bytes(text.encode(), deadline, what)]
            bad = next(i for i, t in enumerate(texts) if t != texts[0])
            raise ValueError(
                f"gcl.{what}: global replica {bad * local} (instance {bad}) called "
                f"{texts[bad]!r}, but replica 0 (instance 0) called {texts[0]!r}: every "
                f"instance must call the same collective with the same options, the same "
                f"number of local replicas and the same structure, shapes and dtypes."
            )
    return Call(leaves, treedef, local * n, n, me, local)
