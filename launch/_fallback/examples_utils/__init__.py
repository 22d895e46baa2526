"""``examples_utils`` where Graphcore's examples-utils is not installed: ``load_lib`` only.

Graphcore's applications call ``examples_utils.load_lib(path.cpp)`` at start-up to build a
C++ file with g++ against the Poplar SDK (through cppimport) and load the shared library
into the process, which registers it with PopART: BERT and GPT-2 load a PopART pattern
(``custom_ops/workarounds/residual_add_inplace_pattern.cpp``, an in-place rewrite for
memory, no change to the numbers), GPT-2 also its ``RemapCE`` custom op
(``custom_ops/remap_tensor_ce.cpp``). Neither can be built or means anything without the SDK:
a pattern rewrites PopART's IR, which the emulator does not have, and a custom op runs here
from a reference implementation registered with ``poptorch.register_custom_op`` (RemapCE's
ships with the emulator). So this ``load_lib`` checks that the file exists, as the real one
does, notes once per file (a ``UserWarning``) that it has no effect, and returns None (the
applications ignore the library it returns). Found by the meta-path finder asked last
(``launch/_popdist_finder``), so an installed examples-utils always wins; any other name is
refused in one line.

References:
    graphcore/examples-utils ``examples_utils/load_lib_utils/load_lib_utils.py``
    (``load_lib(filepath, timeout)``: build with cppimport, ``ctypes.cdll.LoadLibrary``);
    graphcore/examples ``nlp/bert/pytorch/ipu_options.py``,
    ``nlp/gpt2/pytorch/ipu_options.py`` (the calls); PopART User Guide, "Custom operators"
    and "Patterns".
"""

import os as _os
import warnings as _warnings

from launch._fallback_refusal import refusing

__all__ = ["load_lib"]

# The files load_lib was given, in order (each noted once).
_LOADED: list[str] = []


def load_lib(filepath: str, timeout: int = 5 * 60) -> None:
    """Notes that the C++ PopART pattern or custom op at ``filepath`` has no effect here.

    Args:
        filepath: the ``.cpp`` file the real ``load_lib`` would build and load.
        timeout: the real one's lock timeout for the build; accepted, unused.

    Raises:
        FileNotFoundError: ``filepath`` does not exist (as the real one raises).
    """
    del timeout
    if not _os.path.exists(filepath):
        raise FileNotFoundError(
            f"examples_utils.load_lib({filepath!r}): the file does not exist; pass the path "
            f"of the .cpp file to build (relative to the working directory or absolute)."
        )
    path = _os.path.abspath(filepath)
    if path not in _LOADED:
        _LOADED.append(path)
        _warnings.warn(
            f"examples_utils.load_lib({_os.path.basename(path)}): not built, no effect in "
            f"popdist-emu (a PopART pattern or custom-op library needs the Poplar SDK; "
            f"custom ops run from reference implementations: poptorch.register_custom_op)",
            stacklevel=2,
        )


__getattr__, __dir__ = refusing(
    "examples_utils",
    __all__,
    "which has only load_lib; install Graphcore's examples-utils for its benchmarking tools.",
)
