"""Real MPI runs: the same 8 replicas on 1, 2 and 4 instances give byte-identical results
for every collective, and those results match the NumPy statement of the ring order."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from gcl_mpi import run_worker
from gcl_reference import all_reduce, broadcast, draw_case, reduce_scatter

REPLICAS, CASES, SEED = 8, 16, 2024
# (instances, ring): small jobs are normally gathered and reduced by each instance alone
# (gcl._gathered); ring=True forces the cross-instance ring path for the same cases.
LAYOUTS = ((1, False), (2, False), (4, False), (2, True), (4, True))

pytestmark = pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs mpiexec")


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """Results of every layout: {(instances, ring): {"case/collective/replica/leaf": array}}."""
    out = {}
    for n, ring in LAYOUTS:
        path = tmp_path_factory.mktemp(f"gcl{n}") / "results.npz"
        env = {"GCL_EMU_SMALL_JOB_BYTES": "0"} if ring else {}
        args = ("cases", str(path), str(REPLICAS), str(CASES), str(SEED))
        proc = run_worker(n, *args, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with np.load(path) as data:
            out[n, ring] = {k: data[k] for k in data.files}
    return out


def test_every_layout_is_byte_identical(layouts):
    base = layouts[LAYOUTS[0]]
    for n in LAYOUTS[1:]:
        assert layouts[n].keys() == base.keys()
        for key, want in base.items():
            got = layouts[n][key]
            assert (got.dtype, got.shape) == (want.dtype, want.shape), key
            assert got.tobytes() == want.tobytes(), f"{key} differs on {n} instances"


def test_results_match_the_reference(layouts):
    rng = np.random.default_rng(SEED)
    got = layouts[4, True]
    for c in range(CASES):
        case = draw_case(rng, REPLICAS)
        values, op, method, group = case["values"], case["op"], case["method"], case["group"]
        wants = {
            "all_reduce": all_reduce(values, op, method, group),
            "reduce_scatter": reduce_scatter(values, op, method, group),
            "all_gather": all_reduce(values, op, method, group),
            "broadcast": broadcast(values, case["root"], group),
        }
        for name, want in wants.items():
            for r in range(REPLICAS):
                for j, leaf in enumerate(want[r]):
                    g = got[f"{c}/{name}/{r}/{j}"]
                    assert g.tobytes() == np.asarray(leaf).tobytes(), (c, name, r, j, case)


def test_explicit_communicator_gives_the_same_result(layouts):
    got = layouts[4, True]
    explicit = [k for k in got if k.startswith("explicit_comm/")]
    assert len(explicit) >= REPLICAS
    for key in explicit:
        _, replica, leaf = key.split("/")
        assert got[key].tobytes() == got[f"{CASES - 1}/all_reduce/{replica}/{leaf}"].tobytes()


def test_instances_that_disagree_are_named(tmp_path):
    out = tmp_path / "mismatch"
    proc = run_worker(2, "mismatch", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(2):
        message = (tmp_path / f"mismatch.{rank}").read_text()
        assert "global replica 2 (instance 1)" in message, message
        assert "float32[5]" in message and "float32[4]" in message, message
