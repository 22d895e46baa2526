"""The launcher-instance contract (contract/_environment.py): one place spells the variables,
the job configuration and an instance's view are values that survive their round trips."""

import ast
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contract
from contract import InstanceEnvironment, JobConfig, layout_environment
from hardware import LayoutError, ReplicaLayout

ROOT = Path(__file__).parents[2]
CONTRACT = ROOT / "contract" / "_environment.py"
OWNERS = (CONTRACT,)
NAMES = {
    value
    for name, value in vars(contract).items()
    if name.startswith("ENV_") and isinstance(value, str)
}


def _spelled_names(path: Path) -> list[tuple[int, str]]:
    """String constants and keyword names in ``path`` that are one of the contract's names
    (or look like one: POPDIST_ followed by capitals)."""
    pattern = re.compile(r"POPDIST_[A-Z_]+")
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.keyword) and node.arg:
            text = node.arg
        else:
            continue
        if text in NAMES or pattern.fullmatch(text):
            found.append((node.lineno, text))
    return found


def test_only_the_contract_module_spells_the_variable_names():
    assert {"POPDIST_NUM_TOTAL_REPLICAS", "POPDIST_EMU_OFFLINE", "POPDIST_EMU_BOOTSTRAP"} <= NAMES
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if path in OWNERS or relative.parts[0] in ("tests", ".git") or "venv" in str(relative):
            continue
        offenders += [f"{relative}:{line}: {text}" for line, text in _spelled_names(path)]
    assert offenders == [], "use the constants of the contract package instead"


def test_the_grep_sees_a_spelled_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        'import os\nos.environ.get("POPDIST_EMU_SYSTEM")\ndict(POPDIST_EMU_OFFLINE="1")\n'
    )
    assert [text for _, text in _spelled_names(bad)] == [
        "POPDIST_EMU_SYSTEM",
        "POPDIST_EMU_OFFLINE",
    ]


@settings(max_examples=25, derandomize=True, deadline=None)
@given(
    log_replicas=st.integers(0, 10),
    log_instances=st.integers(0, 10),
    ipr=st.sampled_from([1, 2, 4, 8, 16]),
)
def test_layout_environment_round_trip(log_replicas, log_instances, ipr):
    replicas, instances = 2**log_replicas, 2 ** min(log_instances, log_replicas)
    layout = ReplicaLayout(num_replicas=replicas, num_instances=instances, ipus_per_replica=ipr)
    for instance in {0, instances // 2, instances - 1}:
        view = InstanceEnvironment.from_environ(layout_environment(layout, instance))
        assert (view.layout, view.instance, view.popdist_set) == (layout, instance, True)
        assert layout.instance_of_replica(view.replica_offset) == instance


def test_outside_poprun_is_one_replica():
    assert InstanceEnvironment.from_environ({}) == InstanceEnvironment()
    assert InstanceEnvironment().layout == ReplicaLayout()


def test_a_malformed_variable_is_named():
    with pytest.raises(LayoutError, match="POPDIST_NUM_LOCAL_REPLICAS='four' is not an integer"):
        InstanceEnvironment.from_environ({contract.ENV_NUM_LOCAL_REPLICAS: "four"})


def test_job_config_round_trips_and_gives_each_instance_its_view():
    layout = ReplicaLayout(num_replicas=8, num_instances=4, hosts=("a", "b"))
    config = JobConfig(
        layout=layout,
        job_dir="/tmp/job",
        exports=(("FOO", "1"),),
        system="pod16",
        report_dir="out",
        offline=True,
        launcher_pid=42,
        instance=0,
        executable_cache_path="/tmp/cache",
        progress=True,
        command="poprun-emu --num-replicas 8 --num-instances 4 'my train.py'",
    )
    assert JobConfig.from_json(config.to_json()) == config
    for i in range(4):
        env = config.instance_variables(i)
        view = InstanceEnvironment.from_environ(env)
        assert view == config.instance_view(i)
        assert (view.instance, view.system, view.report_dir, view.offline) == (
            i,
            "pod16",
            "out",
            True,
        )
        assert view.local_instance_index == i % 2 and view.progress == (i == 0)
        assert view.command == "poprun-emu --num-replicas 8 --num-instances 4 'my train.py'"
        assert env["FOO"] == "1" and env[contract.ENV_JAX_CACHE_DIR] == "/tmp/cache"
    plain = JobConfig(layout=layout, job_dir="/tmp/job")
    assert contract.ENV_JAX_CACHE_DIR not in plain.instance_variables(0)
    assert InstanceEnvironment.from_environ(plain.instance_variables(3)).offline is False


def test_a_refitted_calibration_file_reaches_the_instance_only_when_there_is_one():
    view = InstanceEnvironment(popdist_set=True, calibration_file="/tmp/refit/calibration.json")
    env = view.to_environ()
    assert env[contract.ENV_CALIBRATION_FILE] == "/tmp/refit/calibration.json"
    assert InstanceEnvironment.from_environ(env) == view
    assert contract.ENV_CALIBRATION_FILE not in InstanceEnvironment().to_environ()
    assert contract.ENV_CALIBRATION_FILE in contract.EMULATOR_VARIABLES  # -x cannot set it


@pytest.mark.parametrize(
    ("content", "record"),
    [
        (None, None),  # no file yet
        (b"", None),
        (b"123", None),  # a part of a record
        (b"123 456 789\n", None),
        (b"12x 456\n", None),
        ("１２ ３４\n".encode(), None),  # full-width digits are no pid
        (b"\xff\xfe\n", None),
        (b"9" * 100, None),  # more than a record holds
        (b"123 456\n", (123, 456)),
        (b"123 456", (123, 456)),
    ],
)
def test_a_pid_file_is_read_whole_or_not_at_all(tmp_path, content, record):
    """The bootstraps' record, read by the watchdog, the program and the stale-job sweep."""
    if content is not None:
        Path(contract.pid_path(str(tmp_path), 3)).write_bytes(content)
    assert contract.read_pid_file(str(tmp_path), 3) == record
    assert contract.pid_file_instances(str(tmp_path)) == ([] if content is None else [3])


def test_a_pid_file_that_is_a_fifo_is_not_waited_on(tmp_path):
    os.mkfifo(contract.pid_path(str(tmp_path), 0))
    assert contract.read_pid_file(str(tmp_path), 0) is None
    assert contract.read_pid_file(str(tmp_path / "gone"), 0) is None
