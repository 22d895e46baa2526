"""Shared test configuration: a deterministic hypothesis profile, as the style guide asks.

JAX computes on the CPU in every test (and in the processes the tests start, which inherit
the variable), also on a machine with a GPU build of JAX: the expected bits are the CPU's.
"""

import os

os.environ["JAX_PLATFORMS"] = "cpu"

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
