"""``horovod.torch`` (popdist-emu's fallback) over real ``poprun-emu`` instances, as Graphcore's
applications call it: every collective checked numerically on 2 and 4 instances in one job
each, against the values NumPy computes from what each instance passed; then one rank
outside the launcher, the offline representative, and the one-line refusals.

Needs torch (``pip install -e .[poptorch]``); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from deadlines import within
from poprun_beside import poprun_emu

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e .[poptorch])")

from launch import _popdist_finder  # noqa: E402
from popdist_emu.popdist import _horovod as hvd  # noqa: E402

PROGRAM = """
import json, sys, torch
import popdist
import horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
x = torch.tensor([1.5 * (r + 1), -2.0 * r + 0.25], dtype=torch.float32)
out = {
    "file": hvd.__file__, "ids": [r, n, hvd.local_rank(), hvd.local_size()],
    "popdist": [popdist.getInstanceIndex(), popdist.getNumInstances()],
    "average": hvd.allreduce(x).tolist(),
    "average_kw": hvd.allreduce(x, average=True).tolist(),
    "sum_kw": hvd.allreduce(x, average=False).tolist(),
    "sum_int": hvd.allreduce(torch.tensor(r + 1), op=hvd.Sum).item(),
    "average_int": hvd.allreduce(torch.tensor([r + 2, -r - 2]), op=hvd.Average).tolist(),
    "min": hvd.allreduce(x, op=hvd.Min).tolist(),
    "max": hvd.allreduce(x, op=hvd.Max).tolist(),
    "product": hvd.allreduce(x, op=hvd.Product).tolist(),
    "scaled": hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25).tolist(),
    "grouped": [t.tolist() for t in hvd.grouped_allreduce([x, torch.tensor(float(r))], op=hvd.Sum)],
    "gather": hvd.allgather(torch.arange(r + 1.0).reshape(-1, 1) + 10 * r).tolist(),
    "gather_time": torch.max(hvd.allgather(torch.tensor([0.5 * r]))).item(),
    "bcast": hvd.broadcast(torch.tensor([float(r), 7.0]), root_rank=n - 1).tolist(),
    "input": x.tolist(),
}
torch.manual_seed(r)
model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
model[1].num_batches_tracked += r
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
out["params"] = {k: v.tolist() for k, v in model.state_dict().items()}
seed = torch.Tensor([1234.0 + r])
hvd.broadcast_(seed, root_rank=1)
out["seed"] = seed.item()
with open(sys.argv[1] + f"/rank{r}.json", "w") as f:
    json.dump(out, f)
"""


def _x(r: int) -> np.ndarray:
    return np.array([1.5 * (r + 1), -2.0 * r + 0.25], np.float32)


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_over_the_instances_of_a_job(tmp_path: Path, n: int) -> None:
    program = tmp_path / "hvd_program.py"
    program.write_text(PROGRAM)
    launcher, env = poprun_emu()
    out = subprocess.run(
        [
            launcher,
            "--num-replicas",
            str(n),
            "--num-instances",
            str(n),
            str(program),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=within(600),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(n)]
    xs = np.stack([_x(r) for r in range(n)])
    total = xs.sum(axis=0, dtype=np.float32)
    torch.manual_seed(0)
    root = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)).state_dict()
    for r, view in enumerate(got):
        assert os.path.join("_fallback", "horovod", "torch") in view["file"]
        assert view["ids"] == [r, n, r, n] and view["popdist"] == [r, n]
        np.testing.assert_array_equal(view["average"], total * np.float32(1 / n))
        np.testing.assert_array_equal(view["average_kw"], view["average"])
        np.testing.assert_array_equal(view["sum_kw"], total)
        assert view["sum_int"] == n * (n + 1) // 2
        ints = np.array([[k + 2, -k - 2] for k in range(n)]).sum(axis=0)
        assert view["average_int"] == list(np.trunc(ints / n).astype(int))
        np.testing.assert_array_equal(view["min"], xs.min(axis=0))
        np.testing.assert_array_equal(view["max"], xs.max(axis=0))
        np.testing.assert_allclose(view["product"], xs.prod(axis=0), rtol=1e-6)
        np.testing.assert_array_equal(view["scaled"], (2 * xs).sum(axis=0) * np.float32(0.25))
        np.testing.assert_array_equal(view["grouped"][0], total)
        assert view["grouped"][1] == sum(range(n))
        assert view["gather"] == [[10.0 * k + i] for k in range(n) for i in range(k + 1)]
        assert view["gather_time"] == 0.5 * (n - 1)
        assert view["bcast"] == [n - 1.0, 7.0]
        np.testing.assert_array_equal(view["input"], _x(r))
        assert view["params"] == {k: v.tolist() for k, v in root.items()}
        assert view["seed"] == 1235.0


@pytest.fixture
def hvd_env(monkeypatch: pytest.MonkeyPatch):
    """popdist-emu's Horovod, initialised, in this process (its view read from the
    environment on every call)."""
    for name in [k for k in os.environ if k.startswith("POPDIST")]:
        monkeypatch.delenv(name)
    monkeypatch.setitem(hvd._STATE, "initialized", True)
    return monkeypatch


def test_one_rank_outside_the_launcher_returns_its_own_values(hvd_env) -> None:
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (0, 1, 0, 1)
    assert hvd.allreduce(x).dtype == torch.float64 and hvd.allreduce(x).tolist() == [[1.0, 2.0]]
    assert hvd.allgather(x).tolist() == [[1.0, 2.0]]
    assert hvd.broadcast(torch.tensor(3), root_rank=0).shape == ()
    assert hvd.allreduce(torch.tensor([1.0], dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_the_offline_representative_stands_for_every_instance(hvd_env) -> None:
    """Under ``--offline-mode`` only instance 0 of 4 runs: a sum is 4 of its value, an
    average its value, a gather 4 copies, a broadcast its value."""
    for name, value in [
        ("POPDIST_NUM_TOTAL_REPLICAS", "4"),
        ("POPDIST_NUM_LOCAL_REPLICAS", "1"),
        ("POPDIST_EMU_OFFLINE", "1"),
    ]:
        hvd_env.setenv(name, value)
    x = torch.tensor([1.5, 3.0])
    assert hvd.size() == 4
    assert hvd.allreduce(x, op=hvd.Sum).tolist() == [6.0, 12.0]
    assert hvd.allreduce(x).tolist() == [1.5, 3.0]
    assert hvd.allreduce(x, op=hvd.Max).tolist() == [1.5, 3.0]
    assert hvd.allgather(x).tolist() == [1.5, 3.0] * 4
    assert hvd.broadcast(x, root_rank=3).tolist() == [1.5, 3.0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: hvd.allreduce(torch.ones(1), op=hvd.Sum, average=True), "supersedes average"),
        (lambda: hvd.allreduce(torch.ones(1), op=hvd.Adasum), "hvd.Adasum is not provided"),
        (lambda: hvd.allreduce(torch.ones(1), op=9), "op=9 is not one of Horovod's"),
        (lambda: hvd.allgather(torch.tensor(1.0)), "pass tensor.reshape(1)"),
        (lambda: hvd.broadcast(torch.ones(1), root_rank=1), "root_rank=1 is not a rank"),
        (lambda: hvd.broadcast_parameters(iter([]), 0), "invalid params of type"),
        (lambda: hvd.init(comm=[0, 1]), "call hvd.init() without arguments"),
        (lambda: hvd.allreduce([1.0]), "expected a torch.Tensor, got list"),
        (lambda: hvd.allreduce(torch.ones(1), process_set=1), "process_set=1 is not supported"),
    ],
)
def test_bad_calls_are_refused_in_one_line(hvd_env, call, message: str) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_calls_before_init_raise_as_horovod_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(hvd._STATE, "initialized", False)
    with pytest.raises(ValueError, match=r"^Horovod has not been initialized; use hvd.init\(\).$"):
        hvd.rank()
    assert not hvd.is_initialized()


def test_average_is_deprecated_as_in_horovod(hvd_env) -> None:
    with pytest.warns(DeprecationWarning, match="replaced with `op`"):
        assert hvd.allreduce(torch.ones(1), average=False).tolist() == [1.0]


def test_the_finder_provides_horovod_and_refuses_other_names() -> None:
    spec = _popdist_finder.PopDistFallbackFinder.find_spec("horovod")
    assert spec is not None and os.path.join("_fallback", "horovod") in str(spec.origin)
    code = (
        "import sys; sys.meta_path.append(__import__('launch._popdist_finder', "
        "fromlist=['x']).PopDistFallbackFinder)\n"
        "import horovod.torch as hvd\n"
        "try:\n    hvd.DistributedOptimizer\nexcept AttributeError as e:\n    print(e)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=within(300),
    )
    assert out.stdout.startswith("horovod.torch.DistributedOptimizer is not provided by")
