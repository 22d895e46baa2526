"""The test modules in popdist_emu's sub-package folders share the models beside this file.

``two_dense_blocks.py`` (one two-block pipeline model) serves the pipeline, programs and
runtime tests; its folder is put on ``sys.path`` here, explicitly, rather than relying on
which test folder pytest happens to insert first. No folder here may be named after a module
that instances import (``popdist``, ``poptorch``): on ``sys.path`` it would shadow the
fallback module, which is found last; so the PopDist API's tests live in ``popdist_api/``.

The ``compiles`` fixture counts XLA compilations with JAX's monitoring events (one
``backend_compile_duration`` event per compilation, with the program's name), not timings:
the programs and runtime tests use it to show what is compiled once and what again.
"""

import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compiled: list[str] | None = None
_listening = False


def _on_event(event: str, duration: float, **kwargs) -> None:
    if event == BACKEND_COMPILE_EVENT and _compiled is not None:
        _compiled.append(str(kwargs.get("fun_name")))


@pytest.fixture
def compiles():
    """The names of the programs XLA compiles while the test runs."""
    global _compiled, _listening
    import jax  # here, not at import: the JAX-free tests need no JAX

    if not _listening:
        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _listening = True
    from jax.experimental.compilation_cache import compilation_cache

    # The run's persistent compilation cache (tests/conftest.py) is off while a test counts:
    # a program loaded from it is not compiled, and the count is of what this process
    # compiles, as it would without a cache.
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    _compiled = []
    try:
        yield _compiled
    finally:
        _compiled = None
        jax.config.update("jax_enable_compilation_cache", True)
        compilation_cache.reset_cache()
