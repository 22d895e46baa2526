"""``poptorch`` where no Poplar SDK provides it: the emulator's (``popdist_emu.poptorch``).

Found only by the meta-path finder asked last (``launch/_popdist_finder``), inside and outside
``poprun-emu``, so an installed real ``poptorch`` always wins.

References:
    PopTorch User Guide, "Reference".
"""

import sys as _sys

try:
    import popdist_emu.poptorch as _emu
except ImportError as _error:  # a program run with another interpreter than poprun-emu's
    raise ImportError(
        f"poptorch (popdist-emu's) needs the popdist_emu package, which this interpreter "
        f"({_sys.executable}) cannot import: pip install popdist-emu here."
    ) from _error

# PopTorch imports torch and registers its torch.ops.poptorch operators at import (Graphcore's
# CNNs call torch.ops.poptorch.push_name_scope in forward hooks); so does this, where torch is.
try:
    import torch as _torch  # noqa: F401
except ImportError:
    pass
else:
    from popdist_emu.poptorch._names import register_torch_ops as _register

    _register()

# Every name is looked up in popdist_emu.poptorch when first asked for, so the torch-backed
# ones (trainingModel, DataLoader, optim) import JAX and torchax only when a program uses them.
__all__: list[str] = []
__all__ += _emu.__all__


def __getattr__(name: str) -> object:
    return getattr(_emu, name)


def __dir__() -> list[str]:
    return sorted(__all__)
