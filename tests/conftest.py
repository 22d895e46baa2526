"""Shared test configuration: a deterministic hypothesis profile, as the style guide asks.

JAX computes on the CPU in every test (and in the processes the tests start, which inherit
the variable), also on a machine with a GPU build of JAX: the expected bits are the CPU's.
"""

import os
import shutil
import tempfile

os.environ["JAX_PLATFORMS"] = "cpu"
# XLA compiles without the backend's code optimisation (LLVM's passes), in this process and
# in every instance a test starts: compiling is most of the suite's time, the programs are
# small, and about a quarter of each compile goes.
# Every comparison a test makes is between programs compiled alike; offline mode compiles
# this way already (popdist_emu.programs._compile.ANALYSIS_ONLY_OPTIONS).
os.environ["XLA_FLAGS"] = (
    f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()
)
import pytest
from deadlines import within
from hypothesis import settings

from contract import (
    ENV_JAX_CACHE_DIR,
    ENV_JAX_CACHE_MIN_COMPILE_SECONDS,
    ENV_JAX_CACHE_MIN_ENTRY_BYTES,
)
from launch._cache import default_cache_dir

# One persistent compilation cache for the whole run, shared by this process, the xdist
# workers (which inherit the variables set here by the controller) and every job a test
# launches (``poprun-emu``'s default executable cache is ``$XDG_CACHE_HOME/popdist-emu/jax``):
# the tests compile the same small programs again and again, in different tests and
# processes, and a program compiled once is loaded thereafter. It is made afresh for each
# run and removed at its end (``pytest_unconfigure``), so no test reads a user's cache or a
# stale one. Every program is cached, however quick its compile, as the launcher does.
RUN_CACHE = "TEST_RUN_CACHE"  # the run's cache folder, made once by the first process
MADE_HERE = RUN_CACHE not in os.environ
if MADE_HERE:
    os.environ[RUN_CACHE] = tempfile.mkdtemp(prefix="popdist-emu-test-cache-")
os.environ["XDG_CACHE_HOME"] = os.environ[RUN_CACHE]
# A benchmark a test runs writes its figures here, not over the committed
# benchmarks/results/ (benchmarks/results_file.py); the folder goes with the run's.
os.environ["BENCHMARK_RESULTS_DIR"] = os.path.join(os.environ[RUN_CACHE], "benchmark-results")
os.environ[ENV_JAX_CACHE_DIR] = default_cache_dir(os.environ)  # the jobs' default
os.makedirs(os.environ[ENV_JAX_CACHE_DIR], mode=0o700, exist_ok=True)
os.environ[ENV_JAX_CACHE_MIN_COMPILE_SECONDS] = "0"
os.environ[ENV_JAX_CACHE_MIN_ENTRY_BYTES] = "0"
settings.register_profile("deterministic", derandomize=True, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

# The longest files first: pytest-xdist (``-n 2 --dist loadfile``) hands files to its
# workers in collection order, so a long file collected late runs alone at the end.
LONGEST_FIRST = ("tests/launch/test_openmpi.py", "tests/popdist_emu/poptorch_frontend/")


def pytest_unconfigure(config):
    """The run's compilation cache goes with the run, removed by the process that made it
    (the controller under xdist, whose workers end first; never a run a test starts)."""
    if MADE_HERE:
        shutil.rmtree(os.environ[RUN_CACHE], ignore_errors=True)


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        path = item.nodeid
        return next((i for i, p in enumerate(LONGEST_FIRST) if path.startswith(p)), 99)

    items.sort(key=rank)  # stable: each file keeps its own order


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item):
    """Each test's pytest-timeout limit (its marker's, else the configured one) scaled as every
    other deadline is (``deadlines.within``), computed as the test starts; the marker is put
    first so that pytest-timeout, whose wrapper runs inside this one, reads it."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        base = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        extra = {k: v for k, v in marker.kwargs.items() if k != "timeout"}
    else:
        base, extra = item.config.getini("timeout"), {}
    if base not in (None, "", 0, "0"):
        item.add_marker(pytest.mark.timeout(within(float(base)), **extra), append=False)
    yield


@pytest.fixture(scope="session")
def resnet50_profile(request, tmp_path_factory):
    """ResNet-50's step profile at the calibration's micro-batch (20), compiled from shapes
    once per test run: the shipped fit (``calibration/test_shared_fit.py``) and the stored
    rows and features (``benchmarks/test_validate.py``) are checked against the same profile,
    which takes most of a minute to compile. Under pytest-xdist the workers share one copy
    through the run's temporary folder (the first computes it under a lock, the others read
    it); it is never kept between runs, so it is always today's model's."""
    import fcntl
    import pickle

    from repo_scripts import load_example

    from popdist_emu import calibration

    def compute():
        return load_example("resnet50").profile(calibration.RESNET50_MICRO_BATCH)

    if not hasattr(request.config, "workerinput"):  # one process: nothing to share
        return compute()
    path = tmp_path_factory.getbasetemp().parent / "resnet50-profile.pickle"  # this run's
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return pickle.loads(path.read_bytes())
        profile = compute()
        path.write_bytes(pickle.dumps(profile))
        return profile
