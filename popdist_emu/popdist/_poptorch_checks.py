"""PopTorch's option values checked when they are set, and misspelt options named with a
close match, each in one line in the program's own words.

PopTorch's count options (``deviceIterations``, ``replicationFactor``,
``Training.gradientAccumulation``, ...) take Python ints: its ``options.py`` passes them to
its C++ options, which refuse a float or a string. The emulator checks them at the setter,
so the line of the program that set a bad value is the one the error names, rather than the
first training call long after. ``bool`` is an ``int`` to Python but never a count here
(``deviceIterations(True)`` is a slip, not one iteration).

References:
    PopTorch User Guide, "Options" (``deviceIterations(device_iterations: int)``,
    ``replicationFactor(replication_factor: int)``, ``randomSeed(random_seed: int)``,
    ``Training.gradientAccumulation(gradient_accumulation: int)``); Python documentation,
    ``difflib.get_close_matches``.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Iterable


def count(call: str, value: object, minimum: int = 1) -> int:
    """``value`` as the int a PopTorch count option takes, or one line naming the call.

    Args:
        call: the call as the program wrote it, e.g. ``"poptorch.Options.deviceIterations"``.
        value: what the program passed.
        minimum: the smallest value PopTorch accepts (1 for counts, 0 for seeds and sizes).

    Returns:
        ``value`` as an ``int`` (a numpy integer becomes a Python one).

    Raises:
        TypeError: not an integer (a float, NaN, a string, a bool).
        ValueError: an integer below ``minimum``.
    """
    wanted = f"PopTorch takes an int >= {minimum}"
    example = f"e.g. {call.rsplit('.', 1)[-1]}({max(minimum, 1)})"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        kind = type(value).__name__
        raise TypeError(f"{call}({value!r}): {wanted}, not a {kind}; pass one, {example}.")
    if int(value) < minimum:
        raise ValueError(f"{call}({value!r}): {wanted}; pass one, {example}.")
    return int(value)


def close_match(name: str, known: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the known name closest to ``name``, or ``""``."""
    found = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=0.7)
    return f" (did you mean {found[0]}?)" if found else ""


def public_methods(cls: type) -> list[str]:
    """The public methods and properties a class defines (its own and inherited)."""
    return [name for name in dir(cls) if not name.startswith("_")]
