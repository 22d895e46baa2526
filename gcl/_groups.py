"""Collective groups: which replicas take part in a collective together.

References:
    GCL User Guide, "Terminology" (collective groups All, Consecutive, Orthogonal);
    graphcore/popart ``willow/src/commgroup.cpp``, ``CommGroup::toReplicaGrouping``:
    Consecutive(k) is stride 1 and group size k; Orthogonal(k) is group size k with stride
    ``num_replicas / k``, so its groups are orthogonal to the Consecutive(num_replicas / k)
    ones.
"""

from __future__ import annotations

import dataclasses
from typing import Union


def _check_size(name: str, k: int, num_replicas: int) -> None:
    if not isinstance(k, int) or k < 1 or num_replicas % k:
        divisors = [d for d in range(1, num_replicas + 1) if num_replicas % d == 0]
        raise ValueError(
            f"`group` {name}({k!r}) needs a group size that divides the {num_replicas} "
            f"replicas: expected one of {divisors}; pick a divisor or use gcl.All()."
        )


@dataclasses.dataclass(frozen=True)
class All:
    """Every replica of the job in one group (GCL ``CommGroupType::All``)."""

    def size(self, num_replicas: int) -> int:
        """Replicas per group."""
        return num_replicas

    def members(self, replica: int, num_replicas: int) -> tuple[int, ...]:
        """Global indices of ``replica``'s group, in ring (position) order."""
        return tuple(range(num_replicas))


@dataclasses.dataclass(frozen=True)
class _Spaced:
    """Groups of ``k`` replicas, the members of a group ``stride`` replicas apart."""

    k: int

    def _stride(self, num_replicas: int) -> int:
        raise NotImplementedError

    def size(self, num_replicas: int) -> int:
        """Replicas per group."""
        _check_size(type(self).__name__, self.k, num_replicas)
        return self.k

    def members(self, replica: int, num_replicas: int) -> tuple[int, ...]:
        """Global indices of ``replica``'s group, in ring (position) order."""
        self.size(num_replicas)
        stride = self._stride(num_replicas)
        first = replica - (replica // stride % self.k) * stride
        return tuple(range(first, first + self.k * stride, stride))


@dataclasses.dataclass(frozen=True)
class Consecutive(_Spaced):
    """Groups of ``k`` consecutive replicas: ``{0..k-1}, {k..2k-1}, ...``.

    With ``k`` = replicas per POD, a collective stays inside each POD.
    """

    def _stride(self, num_replicas: int) -> int:
        return 1


@dataclasses.dataclass(frozen=True)
class Orthogonal(_Spaced):
    """Groups of ``k`` replicas with stride ``num_replicas / k``: ``{0, s, 2s, ...}, ...``.

    With ``k`` = number of PODs, a collective joins the same replica of every POD.
    """

    def _stride(self, num_replicas: int) -> int:
        return num_replicas // self.k


Group = Union[All, Consecutive, Orthogonal]  # noqa: UP007 - readable alias on py3.10


def as_group(group: Group | None) -> Group:
    """``None`` means :class:`All`; anything else must be one of the group types."""
    if group is None:
        return All()
    if not isinstance(group, All | Consecutive | Orthogonal):
        raise TypeError(
            f"`group` must be gcl.All(), gcl.Consecutive(k) or gcl.Orthogonal(k) (or None), "
            f"got {group!r}; wrap the group size, e.g. gcl.Consecutive(4)."
        )
    return group


def groups_of(group: Group, num_replicas: int) -> tuple[tuple[int, ...], ...]:
    """All groups of the job, each in ring order, ordered by their first member."""
    seen: dict[int, tuple[int, ...]] = {}
    for r in range(num_replicas):
        members = group.members(r, num_replicas)
        seen.setdefault(members[0], members)
    return tuple(seen[k] for k in sorted(seen))
