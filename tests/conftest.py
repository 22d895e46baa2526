"""Shared test configuration: a deterministic hypothesis profile, as the style guide asks."""

import os

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
