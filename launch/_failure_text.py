"""What the launcher says when an instance's return leaves its peers waiting.

Three reports share one reason and fix (``_EARLY_RETURN``): the peers outlived the collective
timeout after an instance returned, Open MPI's mpiexec ended them itself, or a peer's collective
stopped because the instance it waited for had returned (``gcl.PeerLeft``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launch._exits import InstanceExit


# Why peers wait for an instance that returned, and the fix, in both reports of it.
_EARLY_RETURN = (
    "they wait for it in MPI_Init or a collective; every instance must run the same "
    "collectives (an empty data shard returns early)"
)


def left_early(
    exits: Mapping[int, InstanceExit],
    instances: Sequence[int],
    seen: Mapping[int, float],
    stopped: Sequence[int],
) -> str:
    """What to report when an instance returned and its peers did not end in time."""
    first = min(seen, key=lambda i: (seen[i], i))
    waiting = [i for i in instances if i not in exits]
    why = "" if stopped else f": {_EARLY_RETURN}"
    return (
        f"instance {first} exited with code 0 but instance(s) {', '.join(map(str, waiting))} "
        f"had not ended {time.monotonic() - seen[first]:.0f} s later (--collective-timeout)"
        f"{why}; ended the job"
    )


def returned_while_waited(gone: int, collective: str, waiter: int) -> str:
    return (
        f"instance {gone} returned from its program (exit code 0) while instance {waiter} "
        f"waited for it in gcl.{collective}: every instance must call the same collectives; "
        f"ended the job"
    )


def ended_by_mpiexec(left: InstanceExit, killed: Sequence[InstanceExit]) -> str:
    """What to report when mpiexec ended the job after ``left`` returned early."""
    names = ", ".join(str(e.instance) for e in killed)
    return (
        f"instance {left.instance} exited with code 0 while instance(s) {names} still ran, "
        f"and mpiexec ended them (SIGTERM): {_EARLY_RETURN}"
    )


def unordered_kills(lost: Sequence[int]) -> str:
    """Several bootstraps gone without a status and nothing to tell which went first: the MPI
    killed the others, and the killed one's program too, before any recorded its end. Named
    all, not guessed (guessing named instance 0 for a killed instance 1 under load)."""
    names = ", ".join(map(str, sorted(lost)))
    return (
        f"instances {names} were killed before reporting their exit status; one of them was "
        "killed first and the MPI then ended the others, too fast to tell which"
    )
