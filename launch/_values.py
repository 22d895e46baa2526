"""Option values read strictly: PopRun's boolean spellings and whole numbers in ASCII digits.

Python's ``int()`` also reads ``1_6`` (as 16), full-width digits (``１６``) and other scripts'
digits (``١٦``); a launcher that accepts them runs a job other than the one the user meant
to type, so only ``[0-9]`` (with an optional minus sign) is read.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from launch._errors import UsageError
from launch._hosts import short

TRUE = ("1", "yes", "true", "on")
FALSE = ("0", "no", "false", "off")
# A sign and at most 18 digits: every count here fits in 64 bits, and int() stays cheap.
_INT = re.compile(r"-?[0-9]{1,18}")


def parse_bool(flag: str, text: str) -> bool:
    """Reads PopRun's boolean spellings: yes/no, 1/0, true/false, on/off (any case)."""
    value = text.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise UsageError(
        f"{flag}={text!r} is not a yes/no value: write {flag}=yes or {flag}=no "
        f"(1/0, true/false and on/off also work)."
    )


def parse_int(flag: str, text: str) -> int:
    """A whole number in ASCII digits (``-?[0-9]{1,18}``), else a one-line UsageError."""
    if not _INT.fullmatch(text):
        raise UsageError(
            f"{flag} expects a whole number in ASCII digits, got {short(text)}: write e.g. "
            f"{flag} 4."
        )
    return int(text)


def unknown_option(token: str, flags: Iterable[str]) -> UsageError:
    """An unknown option, with the closest of ``flags`` when one is close (a misspelt
    ``--num-replica``), as argparse suggests since Python 3.12."""
    name = token.split("=", 1)[0]
    close = difflib.get_close_matches(name, list(flags), n=1, cutoff=0.75)
    fix = f"did you mean {close[0]}? See" if close else "see"
    program = "" if close else "; put options meant for the program after the program name"
    return UsageError(
        f"unknown option {name}: {fix} `poprun-emu --help` for the options supported{program}."
    )
