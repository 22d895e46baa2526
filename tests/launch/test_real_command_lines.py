"""Real ``poprun`` command lines from public repositories run unchanged through poprun-emu.

Each line of ``data/real_poprun_lines.json`` (repository, path and benchmark key cited there)
runs with its own options and a probe program in place of the training script; the probe
records the PopDist view of every instance. To keep the suite within its budget on CI's two
cores, lines with more than 4 instances run with ``--offline-mode --offline-representative``
added: one representative instance stands for the line's own layout (instance 0 of it). All 22
lines also run functionally (8-instance lines included) with MAX_FUNCTIONAL_INSTANCES = 8.
"""

import json
import shlex
import sys
import textwrap
from pathlib import Path

import pytest

LINES = json.loads((Path(__file__).parent / "data" / "real_poprun_lines.json").read_text())["lines"]
MAX_FUNCTIONAL_INSTANCES = 4

PROBE = textwrap.dedent(
    """
    import json, os, sys
    import popdist
    names = ("IPUOF_VIPU_API_TIMEOUT", "POPLAR_LOG_LEVEL", "JAX_COMPILATION_CACHE_DIR",
             "POPDIST_EMU_OFFLINE", "POPDIST_LOCAL_INSTANCE_INDEX")
    view = {
        "instance": popdist.getInstanceIndex(),
        "instances": popdist.getNumInstances(),
        "replicas": popdist.getNumTotalReplicas(),
        "local": popdist.getNumLocalReplicas(),
        "ipus": popdist.getNumIpusPerReplica(),
        "offset": popdist.getReplicaIndexOffset(),
        "env": {k: os.environ.get(k) for k in names},
    }
    with open(os.path.join(sys.argv[1], f"view-{view['instance']}.json"), "w") as f:
        json.dump(view, f)
    """
)


def _variables(entry):
    hosts = ",".join(f"pod-host{i}" for i in range(entry.get("hosts", 1)))
    return {
        "HOSTS": hosts,
        "PYTORCH_CACHE_DIR": "./pt_cache/",
        "VIPU_CLI_API_HOST": "10.1.3.101",
        "PARTITION": "pod64",
        "CLUSTER": "cluster0",
        "IPUOF_VIPU_API_PARTITION_ID": "pod64",
        "TCP_IF_INCLUDE": "10.1.3.0/24",
        "USER": "user",
        "DATASETS_DIR": "/localdata/datasets",
    }


def _expand(text, variables):
    for name in sorted(variables, key=len, reverse=True):
        text = text.replace(f"${name}", variables[name])
    return text


def _option(words, name, default):
    for i, word in enumerate(words):
        if word == name:
            return int(words[i + 1])
        if word.startswith(name + "="):
            return int(word.split("=", 1)[1])
    return default


@pytest.mark.timeout(180)
@pytest.mark.parametrize("entry", LINES, ids=[f"{e['path']}:{e['key'].split()[0]}" for e in LINES])
def test_real_poprun_line_runs_unchanged(poprun, tmp_path, entry):
    words = shlex.split(_expand(entry["poprun"], _variables(entry)))
    replicas = _option(words, "--num-replicas", 1)
    instances = _option(words, "--num-instances", 1)
    ipus = _option(words, "--ipus-per-replica", 1)
    offline = instances > MAX_FUNCTIONAL_INSTANCES
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = tmp_path / "views"
    out.mkdir()
    scaled = ["--offline-mode", "--offline-representative"] if offline else []
    command = [*scaled, *words, sys.executable, str(probe), str(out)]
    result = poprun(*command, timeout=150, env={"POPLAR_LOG_LEVEL": "WARN"})
    assert result.returncode == 0, result.stderr[-3000:]

    views = {v["instance"]: v for v in (json.loads(p.read_text()) for p in out.iterdir())}
    assert sorted(views) == ([0] if offline else list(range(instances)))
    for i, view in views.items():
        assert (view["instances"], view["replicas"], view["ipus"]) == (instances, replicas, ipus)
        assert view["local"] == replicas // instances
        assert view["offset"] == i * replicas // instances
        assert view["env"]["POPDIST_EMU_OFFLINE"] == ("1" if offline else "0")
        for word in words:  # -x NAME=VALUE reaches every instance
            name, _, value = word.partition("=")
            if name == "IPUOF_VIPU_API_TIMEOUT" and value:
                assert view["env"][name] == value
        cache = next((w for w in words if w.startswith("--executable-cache-path")), None)
        if cache:
            assert view["env"]["JAX_COMPILATION_CACHE_DIR"]
    if any(w.startswith(("--vipu", "--sync-type", "--update-partition")) for w in words):
        assert "no effect in the emulator" in result.stderr
    if "--print-topology=yes" in words:
        assert "replicas x" in result.stdout
    if "--mca" in " ".join(words):
        assert "MPI arguments not honoured" in result.stderr and "--mca" in result.stderr
