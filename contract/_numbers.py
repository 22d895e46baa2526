"""Numbers read from a command line by one rule: ASCII digits, as the user typed them.

Python's ``float()`` also reads ``1_0`` (as 10), full-width and other scripts' digits
(``１０``, ``١٠``), exponents (``1e-300``) and ``nan``; a tool that accepts them runs with a
value the user did not mean to type. The launcher's integers follow the same rule
(``launch._values.parse_int``); this is the rule for seconds, shared by ``poprun-emu`` and
``poprun-emu-scaling``, and for the scaling CLI's whole numbers (replica and IPU counts).
"""

from __future__ import annotations

import re

# At most 9 digits on each side of the point: any timeout fits, and float() is exact enough.
_DECIMAL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")
_WHOLE = re.compile(r"[0-9]{1,18}")
# Below a second a collective or a run cannot even start on a loaded machine.
MIN_TIMEOUT_S = 1.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def ascii_seconds(
    text: str, minimum: float = MIN_TIMEOUT_S, maximum: float = MAX_TIMEOUT_S
) -> float | None:
    """``text`` as seconds when it is a decimal in ASCII digits (``60``, ``2.5``) within
    ``[minimum, maximum]``; None otherwise, for the caller to refuse in its own words."""
    if not _DECIMAL.fullmatch(text):
        return None
    seconds = float(text)
    return seconds if minimum <= seconds <= maximum else None


def ascii_whole(text: str) -> int | None:
    """``text`` as a whole number when it is 1 to 18 ASCII digits (``16``, ``0``); None
    otherwise (a sign, ``1_6``, full-width digits, a blank), for the caller to refuse in its
    own words."""
    return int(text) if _WHOLE.fullmatch(text) else None
