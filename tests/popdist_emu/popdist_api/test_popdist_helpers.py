"""PopDist's framework helpers, called as real host code calls them, and ``import popdist``.

- ``popdist.poptorch.Options(ipus_per_replica=...)`` with PopTorch's option methods, mapped onto
  the emulator's Options and accepted by ``popdist_emu.Trainer``;
- ``popdist.tensorflow.set_ipu_config`` and ``popdist.popart.configureSessionOptions`` set the
  fields PopDist documents on the object passed in;
- ``import popdist`` outside the launcher gives the single-process view, without shadowing
  another installed ``popdist``, and the shim exposes PopDist's names only.
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from deadlines import within

from popdist_emu import Options as EmulatorOptions
from popdist_emu import PipelinedExecution, ReplicaLoader, Stage, Trainer
from popdist_emu.popdist._frameworks import configureSessionOptions, set_ipu_config
from popdist_emu.popdist._poptorch_options import Options, TensorLocationSettings

API_NAMES = [
    "checkNumIpusPerReplica",
    "execute_on_instances",
    "getDeviceId",
    "getInstanceIndex",
    "getLocalInstanceIndex",
    "getNumInstances",
    "getNumIpusPerReplica",
    "getNumLocalReplicas",
    "getNumTotalReplicas",
    "getReplicaIndexOffset",
    "init",
    "isPopdistEnvSet",
]


class Enum:
    """Stands in for a PopTorch enumeration member (``poptorch.OutputMode.All``)."""

    def __init__(self, name):
        self.name = name


def test_poptorch_idiom_maps_onto_the_emulator_options():
    # As graphcore/examples' ipu_options.py writes it (enums by member, as PopTorch's).
    opts = Options(ipus_per_replica=1)
    opts.deviceIterations(4)
    opts.Training.gradientAccumulation(8)
    opts.Training.accumulationAndReplicationReductionType(Enum("Sum"))
    opts.randomSeed(42)
    opts.outputMode(Enum("All"))
    opts.TensorLocations.setOptimizerLocation(
        TensorLocationSettings().useOnChipStorage(False).useReplicatedTensorSharding(True)
    )
    opts.setAvailableMemoryProportion({"IPU0": 0.2})
    strategy = PipelinedExecution(Stage("B0"))
    opts.setExecutionStrategy(strategy)
    opts.Precision.setPartialsType(Enum("torch.half"))
    assert opts.to_options() == EmulatorOptions(
        replication_factor=1,
        gradient_accumulation=8,
        device_iterations=4,
        output_mode="all",
        reduction="sum",
        replicated_tensor_sharding=True,
        offload_optimiser=True,
        available_memory_proportion={"IPU0": 0.2},
        execution_strategy=strategy,
        partials_type="half",
    )
    assert (opts.random_seed, opts.available_memory_proportion) == (42, {"IPU0": 0.2})
    assert opts.execution_strategy is strategy
    assert opts.Precision.setPartialsType("torch.float32").to_options().partials_type == "float"
    assert opts.Precision.setPartialsType("torch.float16").to_options().partials_type == "half"
    with pytest.raises(ValueError, match=r"setPartialsType\('int8'\): PopTorch takes"):
        opts.Precision.setPartialsType("int8")
    assert opts.replication_factor == 1 and opts.global_batch_size(2) == 16


def test_no_effect_methods_warn_once_and_harmful_ones_are_refused():
    opts = Options()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opts.Precision.enableStochasticRounding(True)
        opts.Precision.enableStochasticRounding(True)
        opts.Jit.traceModel(True)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert "Precision.enableStochasticRounding: accepted, no effect" in messages[0]
    assert opts.enableSyntheticData(True) is opts  # provided now: the device makes the inputs
    with pytest.raises(ValueError, match="EveryN needs a period of at least 1"):
        opts.outputMode(Enum("EveryN"))  # Sum and EveryN(n) are PopTorch's (test_outputs)
    with pytest.raises(ValueError, match="setWeightLocation: the emulator keeps weights"):
        opts.TensorLocations.setWeightLocation(TensorLocationSettings().useOnChipStorage(False))
    with pytest.raises(AttributeError, match="no 'noSuchOption'"):
        opts.noSuchOption(1)


def test_ipus_per_replica_must_match_poprun():
    with pytest.raises(ValueError, match="--ipus-per-replica 1"):
        Options(ipus_per_replica=4)
    with pytest.raises(ValueError, match="ipus_per_replica=2"):
        set_ipu_config(SimpleNamespace(), ipus_per_replica=2)


def test_trainer_accepts_popdist_poptorch_options_directly():
    opts = Options().deviceIterations(2)
    opts.Training.gradientAccumulation(2)

    def loss_fn(params, batch):
        x, y = batch
        return jnp.mean((x @ params["w"] - y) ** 2)

    params = {"w": jnp.zeros((3, 1))}
    rng = np.random.default_rng(0)
    xy = (rng.normal(size=(32, 3)).astype(np.float32), rng.normal(size=(32, 1)).astype(np.float32))
    trainer = Trainer(loss_fn, optax.sgd(0.1), params, opts)
    reference = Trainer(loss_fn, optax.sgd(0.1), params, opts.to_options())
    assert trainer.options == reference.options
    loader = ReplicaLoader(xy, 2, trainer.options, seed=0)
    a, b = trainer.step(loader.batch(0)), reference.step(loader.batch(0))
    assert a == b
    assert jax.tree.all(jax.tree.map(np.array_equal, trainer.params, reference.params))


def _config():
    distribution = SimpleNamespace(process_count=0, process_index=0)
    return SimpleNamespace(
        select_ipus=[], experimental=SimpleNamespace(multi_replica_distribution=distribution)
    )


def test_tensorflow_and_popart_helpers_outside_poprun():
    config = set_ipu_config(_config(), ipus_per_replica=1, configure_device=True)
    assert config.select_ipus == [0]
    assert vars(config.experimental.multi_replica_distribution) == {
        "process_count": 1,
        "process_index": 0,
    }
    untouched = set_ipu_config(_config(), 1, configure_device=False)
    assert untouched.select_ipus == []
    opts = configureSessionOptions(SimpleNamespace())
    assert vars(opts) == {
        "enableReplicatedGraphs": True,
        "replicatedGraphCount": 1,
        "enableDistributedReplicatedGraphs": True,
        "globalReplicaOffset": 0,
        "globalReplicationFactor": 1,
    }


HOST_CODE = textwrap.dedent(
    """
    import json, sys
    from types import SimpleNamespace
    import popdist, popdist.poptorch, popdist.tensorflow, popdist.popart
    opts = popdist.poptorch.Options(ipus_per_replica=2)
    opts.deviceIterations(2)
    cfg = SimpleNamespace(select_ipus=None, experimental=SimpleNamespace(
        multi_replica_distribution=SimpleNamespace()))
    popdist.tensorflow.set_ipu_config(cfg, ipus_per_replica=2, configure_device=True)
    session = popdist.popart.configureSessionOptions(SimpleNamespace())
    view = {
        "names": sorted(n for n in vars(popdist) if not n.startswith("_")),
        "dir": dir(popdist),
        "replication": opts.to_options().replication_factor,
        "select_ipus": cfg.select_ipus,
        "process": vars(cfg.experimental.multi_replica_distribution),
        "session": vars(session),
    }
    i = popdist.getInstanceIndex()
    with open(f"{sys.argv[1]}/view-{i}.json", "w") as f:
        json.dump(view, f)
    """
)


@pytest.mark.timeout(120)
def test_helpers_inside_poprun_emu_and_only_popdist_names(tmp_path):
    program = tmp_path / "host.py"
    program.write_text(HOST_CODE)
    command = [sys.executable, "-m", "launch", "--num-replicas=8", "--num-instances=2"]
    command += ["--ipus-per-replica=2", str(program), str(tmp_path)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=within(100), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    for i in (0, 1):
        view = json.loads((tmp_path / f"view-{i}.json").read_text())
        submodules = ["popart", "poptorch", "tensorflow"]
        assert view["names"] == sorted(API_NAMES + submodules)
        assert view["dir"] == sorted(API_NAMES + submodules)
        assert view["replication"] == 4
        assert view["process"] == {"process_count": 2, "process_index": i}
        # 16 IPUs: 16 single-IPU devices, 8 pairs, 4 quads (ids 0-27), then the 8-IPU groups
        assert view["select_ipus"] == [28 + i]
        assert view["session"] == {
            "enableReplicatedGraphs": True,
            "replicatedGraphCount": 4,
            "enableDistributedReplicatedGraphs": True,
            "globalReplicaOffset": 4 * i,
            "globalReplicationFactor": 8,
        }


def _plain_python(code, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("POPDIST_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=within(60),
        env={**clean, **env},
        cwd="/",
    )


def test_import_popdist_outside_the_launcher_is_the_single_process_view():
    result = _plain_python(
        "import popdist, popdist.poptorch; "
        "print(popdist.isPopdistEnvSet(), popdist.getNumInstances(), "
        "popdist.getNumTotalReplicas(), popdist.getInstanceIndex(), "
        "popdist.poptorch.Options().to_options().replication_factor)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "1", "1", "0", "1"]


def test_a_real_popdist_is_never_shadowed(tmp_path):
    real = tmp_path / "popdist"
    real.mkdir()
    (real / "__init__.py").write_text("SDK = 'poplar'\n")
    result = _plain_python(
        "import popdist; print(popdist.SDK, popdist.__file__)", PYTHONPATH=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["poplar", str(real / "__init__.py")]
