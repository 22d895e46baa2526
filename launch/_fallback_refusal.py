"""The one-line refusal a fallback module gives for a name it does not provide.

A fallback (``popart``, ``horovod.torch``, ``examples_utils``) stands in for a module that
only the Poplar SDK, Horovod or Graphcore's examples-utils bring, with just what Graphcore's
applications use; any other name is an ``AttributeError`` in one line naming it, what the
fallback has and what to install (PEP 562: a module's ``__getattr__`` and ``__dir__``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def refusing(
    module: str, names: Sequence[str], rest: str
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the fallback ``module`` whose names are ``names``;
    ``rest`` ends the refusal (``{names}`` in it stands for the names, comma-separated)."""

    def getattr_(name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        listed = ", ".join(sorted(names))
        raise AttributeError(
            f"{module}.{name} is not provided by popdist-emu's {module}, "
            + rest.replace("{names}", listed)
        )

    def dir_() -> list[str]:
        return sorted(names)

    return getattr_, dir_
