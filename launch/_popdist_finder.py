"""``import popdist``, ``poptorch`` and the IPU-only modules outside a Poplar SDK: never in the way.

Real PopDist, imported in a process PopRun did not start, answers for one instance with one
replica (``isPopdistEnvSet()`` is false), so a script runs plainly while it is written. The
installed ``popdist_emu_popdist.pth`` registers :class:`PopDistFallbackFinder` at the END of
``sys.meta_path``: Python asks it only after every other finder (the path, an editable
install's finder) found no ``popdist``, so a Poplar SDK's real ``popdist`` always wins, and
inside ``poprun-emu`` instances the shim on PYTHONPATH is found first anyway.

This module is loaded from its file by the .pth line at interpreter start-up, without
importing the ``launch`` package (which would cost every Python process tens of
milliseconds); it imports only the standard library.

References:
    Python Language Reference, "The import system" (meta path finders, ``find_spec``);
    Python ``site`` module documentation (``.pth`` files: lines starting with ``import`` are
    executed).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import ModuleSpec

_HERE = os.path.dirname(os.path.abspath(__file__))
SHIM_PACKAGE = os.path.join(_HERE, "_shim", "popdist")
# The top-level modules the emulator provides when nothing else does, and where. ``_shim`` is
# also on PYTHONPATH inside poprun-emu instances (popdist must be the emulator's there);
# ``_fallback`` is only ever reached through this finder, so a Poplar SDK's real ``poptorch``
# wins inside poprun-emu as well as outside.
# ``popart``, ``horovod`` and ``examples_utils`` are the other modules Graphcore's applications
# import that only a Poplar SDK (or Horovod built for it, or Graphcore's examples-utils) brings;
# they are found the same way, last, so an installed one wins.
SHIM_PACKAGES = {
    "popdist": SHIM_PACKAGE,
    **{
        name: os.path.join(_HERE, "_fallback", name)
        for name in ("poptorch", "popart", "horovod", "examples_utils")
    },
}


class PopDistFallbackFinder:
    """Finds the emulator's ``popdist``, ``poptorch`` and fallbacks when nothing else provides
    them."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: object = None, target: object = None
    ) -> ModuleSpec | None:
        package = SHIM_PACKAGES.get(fullname)
        if package is None:
            return None  # popdist.poptorch etc. come from the package's __path__
        init = os.path.join(package, "__init__.py")
        if not os.path.isfile(init):
            return None
        return importlib.util.spec_from_file_location(
            fullname, init, submodule_search_locations=[package]
        )


def install() -> None:
    """Appends the finder to ``sys.meta_path`` once (last, so that it is asked last)."""
    if not any(getattr(f, "__name__", "") == PopDistFallbackFinder.__name__ for f in sys.meta_path):
        sys.meta_path.append(PopDistFallbackFinder)


install()
