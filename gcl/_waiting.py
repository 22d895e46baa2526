"""The launcher's record of a long wait in a collective (``GCL_EMU_WAITING_FILE``).

When a collective times out, the launcher must tell the instances that waited in it from one
that never came (stuck in its program: a sleep, a loop, a hung data loader), and a peer's
``PeerLeft`` from the instance that returned. So a wait longer than ``ANNOUNCE_WAIT_S`` leaves
``"<collectives> <what>"`` in the file the launcher names, a ``PeerLeft`` adds
``" left <instance>"``, and the record is removed when the wait ends (a timeout leaves it).
Outside the launcher the variable is unset and nothing is written.
"""

from __future__ import annotations

import contextlib
import os

from contract import ENV_GCL_WAITING_FILE

ANNOUNCE_WAIT_S = 1.0
WAITING_FILE = os.environ.get(ENV_GCL_WAITING_FILE, "")


def record_waiting(what: str, collectives: int, gone: int | None = None) -> None:
    """Leaves the collective's number and ``what`` in the launcher's waiting file, and the
    peer that returned while this instance waited for it, if one did."""
    temporary = f"{WAITING_FILE}.{os.getpid()}.tmp"
    with contextlib.suppress(OSError):  # no job directory: nobody to tell
        with open(temporary, "w") as f:
            f.write(f"{collectives} {what}{'' if gone is None else f' left {gone}'}\n")
        os.replace(temporary, WAITING_FILE)


def done_waiting() -> None:
    """The wait ended: the record goes."""
    with contextlib.suppress(OSError):
        os.remove(WAITING_FILE)
