"""Offline mode starts PopRun's instances; --output-filename writes Open MPI's per-instance logs."""

import json
import textwrap

import pytest

from launch._mpi import find_mpiexec, mpi_flavour

PROBE = textwrap.dedent(
    """
    import json, os, sys
    import popdist
    from mpi4py import MPI
    summed = MPI.COMM_WORLD.allreduce(1) if popdist.getNumInstances() > 1 else 1
    i = popdist.getInstanceIndex()
    with open(os.path.join(sys.argv[1], f"view-{i}.json"), "w") as f:
        offline = os.environ["POPDIST_EMU_OFFLINE"]
        json.dump({"instance": i, "summed": summed, "offline": offline}, f)
    """
)

TALKER = textwrap.dedent(
    """
    import sys, popdist
    i = popdist.getInstanceIndex()
    print(f"out {i}")
    print(f"err {i}", file=sys.stderr)
    """
)


@pytest.fixture
def probe(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    out = tmp_path / "views"
    out.mkdir()
    return str(path), out


def _views(out):
    return {v["instance"]: v for v in (json.loads(p.read_text()) for p in out.iterdir())}


@pytest.mark.timeout(120)
def test_offline_mode_starts_every_instance_and_they_communicate(poprun, probe):
    program, out = probe
    result = poprun("--offline-mode", "--num-replicas", "8", "--num-instances", "4", program, out)
    assert result.returncode == 0, result.stderr
    views = _views(out)
    assert sorted(views) == [0, 1, 2, 3]
    assert {v["summed"] for v in views.values()} == {4}  # an allreduce over the instances
    assert {v["offline"] for v in views.values()} == {"1"}


@pytest.mark.timeout(120)
def test_offline_mode_past_this_machine_uses_one_representative(poprun, probe):
    program, out = probe
    result = poprun(
        "--offline-mode", "--num-replicas", "65536", "--num-instances", "2048", program, out
    )
    assert result.returncode == 0, result.stderr
    assert sorted(_views(out)) == [0]
    note = [line for line in result.stderr.splitlines() if "would not fit" in line]
    assert len(note) == 1 and "2048 instances" in note[0] and "instance 0 stands" in note[0]


@pytest.mark.timeout(120)
def test_offline_representative_is_asked_for_explicitly(poprun, probe):
    program, out = probe
    result = poprun(
        "--offline-mode",
        "--offline-representative",
        "--num-replicas=4",
        "--num-instances=2",
        program,
        out,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(_views(out)) == [0]
    assert "--offline-representative: instance 0 stands for all 2 instances" in result.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("only", [None, "1"])
def test_output_filename_writes_open_mpi_layout_and_keeps_the_terminal(poprun, tmp_path, only):
    program = tmp_path / "talker.py"
    program.write_text(TALKER)
    logs = tmp_path / "logs"
    extra = ["--only-output-from-instance", only] if only else []
    result = poprun(
        "--num-replicas=2",
        "--num-instances=2",
        *extra,
        f"--mpi-global-args=--tag-output --output-filename {logs}",
        str(program),
    )
    assert result.returncode == 0, result.stderr
    for i in (0, 1):
        assert (logs / "1" / f"rank.{i}" / "stdout").read_text() == f"out {i}\n"
        assert (logs / "1" / f"rank.{i}" / "stderr").read_text() == f"err {i}\n"
    if only is None:
        assert sorted(result.stdout.splitlines()) == ["[1,0]<stdout>:out 0", "[1,1]<stdout>:out 1"]
        assert "[1,1]<stderr>:err 1" in result.stderr
    else:
        assert result.stdout == "out 1\n"


def test_mca_is_dropped_with_one_note_or_passed_to_open_mpi(poprun, tmp_path):
    program = tmp_path / "talker.py"
    program.write_text(TALKER)
    result = poprun(
        "--num-replicas=2",
        "--num-instances=2",
        "--mpi-global-args=--mca btl_tcp_if_include eno1 --allow-run-as-root",
        "--mpi-local-args=-x FOO=bar",
        str(program),
    )
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "not honoured" in line]
    if mpi_flavour(find_mpiexec()) == "openmpi":
        assert notes == []  # Open MPI reads --mca itself
    else:
        assert len(notes) == 1 and "--mca btl_tcp_if_include eno1" in notes[0]


def test_np_in_mpi_args_is_refused_before_launch(poprun, tmp_path):
    program = tmp_path / "talker.py"
    program.write_text(TALKER)
    result = poprun("--mpi-global-args=-np 4", str(program))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "-np cannot be honoured" in result.stderr


def test_export_and_import_config(poprun, tmp_path):
    program = tmp_path / "talker.py"
    program.write_text(TALKER)
    config = tmp_path / "job.json"
    first = poprun(
        "--num-replicas=4", "--num-instances=2", f"--export-config={config}", str(program)
    )
    assert first.returncode == 0, first.stderr
    assert json.loads(config.read_text()) == ["--num-replicas=4", "--num-instances=2"]
    again = poprun(f"--export-config={config}", str(program))
    assert again.returncode == 2 and "--overwrite-config=yes" in again.stderr
    second = poprun(f"--import-config={config}", "--num-instances=4", str(program))
    assert second.returncode == 0, second.stderr
    assert sorted(second.stdout.splitlines()) == [f"[1,{i}]<stdout>:out {i}" for i in range(4)]


@pytest.mark.parametrize("planted", ["1", "1/rank.1", "1/rank.1/stderr"])
def test_logs_are_never_written_through_a_symlink(poprun, tmp_path, planted):
    program = tmp_path / "talker.py"
    program.write_text(TALKER)
    logs = tmp_path / "logs"
    target = tmp_path / "target"
    target.mkdir()
    (target / "victim").write_text("keep\n")
    link = logs / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target / "victim" if planted.endswith("stderr") else target)
    result = poprun(
        "--num-replicas=2",
        "--num-instances=2",
        f"--mpi-global-args=--output-filename {logs}",
        str(program),
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "is a symbolic link" in result.stderr
    assert sorted(p.name for p in target.iterdir()) == ["victim"]
    assert (target / "victim").read_text() == "keep\n"
    assert result.stdout == ""  # refused before any instance started


def test_logs_in_a_directory_others_can_write_are_refused(poprun, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    result = poprun(f"--mpi-global-args=--output-filename {shared / 'logs'}", "x.py", timeout=60)
    assert result.returncode == 2 and "is world-writable" in result.stderr, result.stderr
    assert not (shared / "logs").exists()
