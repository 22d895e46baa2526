"""Real jobs through poprun-emu: every instance's PopDist view, environment, pinning and output.

Each test is one real job of a few MPI processes, so they are few and cover several
behaviours each.
"""

import importlib.util
import json
import os
import sys

import pytest

GETTERS = (
    "isPopdistEnvSet",
    "getNumTotalReplicas",
    "getNumLocalReplicas",
    "getNumInstances",
    "getInstanceIndex",
    "getLocalInstanceIndex",
    "getReplicaIndexOffset",
    "getNumIpusPerReplica",
    "getDeviceId",
)

# A PopDist host program: `import popdist` must resolve inside instances. It records its view
# in <out>/view-<instance>.json and prints one line to stdout and one to stderr.
CLIENT = f"""
import json, os, sys
import popdist

out = sys.argv[1]
view = {{name: getattr(popdist, name)() for name in {GETTERS!r}}}
view["env"] = {{k: v for k, v in os.environ.items()
               if k.startswith(("POPDIST", "OMP_", "OPENBLAS", "MKL_", "XLA_", "FOO", "JAX_"))}}
view["cpus"] = sorted(os.sched_getaffinity(0))
view["popdist_file"] = popdist.__file__
import popdist.poptorch
view["poptorch_replication"] = popdist.poptorch.Options().replication_factor
if "--mpi" in sys.argv:
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    view["mpi"] = [world.Get_rank(), world.Get_size(), world.allreduce(world.Get_rank())]
instance = popdist.getInstanceIndex()
with open(os.path.join(out, f"view-{{instance}}.json"), "w") as f:
    json.dump(view, f)
print(f"hello from {{instance}}")
print(f"note from {{instance}}", file=sys.stderr)
"""


@pytest.fixture
def client(tmp_path):
    path = tmp_path / "client.py"
    path.write_text(CLIENT)
    out = tmp_path / "views"
    out.mkdir()
    return str(path), out


def _views(out):
    views = {}
    for name in os.listdir(out):
        with open(out / name) as f:
            view = json.load(f)
        views[view["getInstanceIndex"]] = view
    return views


def _check_layout(views, *, replicas, instances, ipus, local_indices):
    local = replicas // instances
    assert sorted(views) == list(range(instances))
    for i, view in views.items():
        assert view["isPopdistEnvSet"] is True
        assert view["getNumTotalReplicas"] == replicas
        assert view["getNumLocalReplicas"] == local
        assert view["getNumInstances"] == instances
        assert view["getReplicaIndexOffset"] == i * local
        assert view["getNumIpusPerReplica"] == ipus
        assert view["getLocalInstanceIndex"] == local_indices[i]
        assert view["env"]["POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"] == "1"
        assert view["poptorch_replication"] == local
        assert view["popdist_file"].endswith(
            os.path.join("launch", "_shim", "popdist", "__init__.py")
        )


def test_single_instance(poprun, client):
    program, out = client
    result = poprun(program, str(out))
    assert result.returncode == 0, result.stderr
    views = _views(out)
    _check_layout(views, replicas=1, instances=1, ipus=1, local_indices=[0])
    assert views[0]["getDeviceId"] == 0
    # One instance prints: its lines come untagged (tags tell several instances apart).
    assert result.stdout == "hello from 0\n"
    assert result.stderr == "note from 0\n"
    # PopRun users pass --tag-output: then even one instance's lines are tagged.
    tagged = poprun("--mpi-global-args=--tag-output", program, str(out))
    assert tagged.returncode == 0, tagged.stderr
    assert tagged.stdout == "[1,0]<stdout>:hello from 0\n"
    assert tagged.stderr == "[1,0]<stderr>:note from 0\n"


def test_four_replicas_on_two_instances_with_mpi_and_exports(poprun, client, tmp_path):
    program, out = client
    result = poprun(
        "--num-replicas",
        "4",
        "--num-instances",
        "2",
        "--system",
        "POD16",
        "--report-dir",
        "reports",
        "--mpi-global-args=--tag-output --allow-run-as-root",
        "--mpi-local-args=-x FOO_SET=bar -x FOO_INHERITED",
        "--vipu-partition=p",
        "--executable-cache-path",
        "cache",
        program,
        str(out),
        "--mpi",
        env={"FOO_INHERITED": "from-launcher", "XLA_FLAGS": "--xla_dump_to=/nowhere"},
    )
    assert result.returncode == 0, result.stderr
    views = _views(out)
    _check_layout(views, replicas=4, instances=2, ipus=1, local_indices=[0, 1])
    # The instance index is the MPI rank: the program's own MPI sees the same job.
    assert [views[i]["mpi"] for i in (0, 1)] == [[0, 2, 1], [1, 2, 1]]
    # Both instances' IPUs form one 2-IPU device each, after the host's 4 single IPUs.
    assert [views[i]["getDeviceId"] for i in (0, 1)] == [4, 5]
    for i, view in views.items():
        env = view["env"]
        assert env["POPDIST_EMU_INSTANCE_INDEX"] == str(i)
        assert env["POPDIST_EMU_SYSTEM"] == "POD16"
        assert env["POPDIST_EMU_REPORT_DIR"] == "reports"
        assert env["POPDIST_EMU_OFFLINE"] == "0"
        assert env["POPDIST_EMU_JOB_DIR"]
        assert env["FOO_SET"] == "bar"
        assert env["FOO_INHERITED"] == "from-launcher"
        assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "cache")
        assert (
            env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
        )
        assert env["XLA_FLAGS"].startswith("--xla_dump_to=/nowhere ")
        assert "--xla_cpu_multi_thread_eigen=false" in env["XLA_FLAGS"]
        assert "POPDIST_EMU_BOOTSTRAP" not in env
        assert len(view["cpus"]) == 1
    # Instances are pinned round-robin over the CPUs this job may use.
    cpus = sorted(os.sched_getaffinity(0))
    assert [views[i]["cpus"][0] for i in (0, 1)] == [cpus[0], cpus[1 % len(cpus)]]
    # Every line tagged as Open MPI's --tag-output does, and no double tags.
    assert sorted(result.stdout.splitlines()) == [
        "[1,0]<stdout>:hello from 0",
        "[1,1]<stdout>:hello from 1",
    ]
    assert "[1,0]<stderr>:note from 0" in result.stderr
    assert "[1,1]<stderr>:note from 1" in result.stderr
    assert "--vipu-partition: no effect in the emulator" in result.stderr
    # The job directory is gone after the job.
    assert not os.path.exists(views[0]["env"]["POPDIST_EMU_JOB_DIR"])


def test_eight_replicas_on_four_instances_two_hosts_two_ipus(poprun, client):
    program, out = client
    result = poprun(
        "--num-replicas=8",
        "--num-instances=4",
        "--ipus-per-replica=2",
        "-H",
        "a,b",
        "--print-topology=yes",
        program,
        str(out),
    )
    assert result.returncode == 0, result.stderr
    views = _views(out)
    _check_layout(views, replicas=8, instances=4, ipus=2, local_indices=[0, 1, 0, 1])
    assert {view["env"]["POPDIST_EMU_HOSTS"] for view in views.values()} == {"a,b"}
    lines = result.stdout.splitlines()
    assert lines[0].startswith("8 replicas x 2 IPUs per replica = 16 IPUs, 4 instances on 2 hosts")
    assert lines[-1].startswith("[1,")  # the table comes before any instance's output
    assert sum(line.startswith("[1,") for line in lines) == 4


def test_only_output_from_one_instance(poprun, client):
    program, out = client
    result = poprun(
        "--num-replicas=2", "--num-instances=2", "--only-output-from-instance=1", program, str(out)
    )
    assert result.returncode == 0, result.stderr
    assert len(_views(out)) == 2  # both ran
    assert result.stdout == "hello from 1\n"
    assert result.stderr == "note from 1\n"


def test_offline_mode_runs_instance_zero_of_the_full_layout(poprun, client):
    program, out = client
    result = poprun(
        "--offline-mode",
        "--offline-representative",
        "--num-replicas=16",
        "--num-instances=4",
        "-v",
        program,
        str(out),
    )
    assert result.returncode == 0, result.stderr
    views = _views(out)
    assert sorted(views) == [0]
    view = views[0]
    assert (view["getNumTotalReplicas"], view["getNumLocalReplicas"]) == (16, 4)
    assert (view["getNumInstances"], view["getReplicaIndexOffset"]) == (4, 0)
    assert view["env"]["POPDIST_EMU_OFFLINE"] == "1"
    assert len(view["cpus"]) == 1
    assert "offline (instance 0 only)" in result.stderr


def test_the_example_client_gets_poprun_layout_16_on_4(poprun):
    """The issue's check: offsets 0/4/8/12, 4 local replicas, 4 instances, with the program
    given as an executable and its script (``python3 client.py``)."""
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "popdist_client.py")
    result = poprun(
        "--num-replicas", "16", "--num-instances", "4", sys.executable, example, "--json"
    )
    assert result.returncode == 0, result.stderr
    views = {}
    for line in result.stdout.splitlines():
        tag, _, text = line.partition(":")
        views[tag] = json.loads(text)
    assert sorted(views) == [f"[1,{i}]<stdout>" for i in range(4)]
    for i in range(4):
        view = views[f"[1,{i}]<stdout>"]
        assert view["getInstanceIndex"] == i
        assert view["getReplicaIndexOffset"] == 4 * i
        assert (view["getNumLocalReplicas"], view["getNumInstances"]) == (4, 4)
        assert view["getNumTotalReplicas"] == 16


def test_popdist_outside_the_launcher_comes_from_the_fallback_finder():
    # Issue 13: PopDist's single-process view outside the launcher, through the finder that
    # is asked last (tests/popdist_emu/popdist_api/test_popdist_helpers.py checks the view).
    spec = importlib.util.find_spec("popdist")
    assert spec is not None and spec.origin.endswith("_shim/popdist/__init__.py")
