"""``horovod.torch`` where Horovod is not installed: the emulator's, over the job's instances.

The names Graphcore's PopTorch applications call (``popdist_emu.popdist._horovod`` says what
each does); any other is refused in one line naming it.

References:
    Horovod documentation, "horovod.torch" API.
"""

import sys as _sys

from launch._fallback_refusal import refusing

try:
    from popdist_emu.popdist import _horovod as _emu
    from popdist_emu.popdist._horovod import *  # noqa: F403 - Horovod's names, listed there
except ImportError as _error:  # a program run with another interpreter than poprun-emu's
    raise ImportError(
        f"horovod.torch (popdist-emu's) needs the popdist_emu package, which this interpreter "
        f"({_sys.executable}) cannot import: pip install popdist-emu here."
    ) from _error

__all__: list[str] = []
__all__ += _emu.__all__


__getattr__, __dir__ = refusing(
    "horovod.torch",
    __all__,
    "which has only what Graphcore's PopTorch applications call ({names}); "
    "install Horovod for the rest.",
)
