"""PopRun's command-line reference, every option with its spellings, and the MPI selection."""

import os

import pytest

from launch import UsageError, parse_command_line
from launch._mpi import find_mpiexec
from launch._placement import find_libmpi, hosts_argument, offline_capacity

PARTITION_OPTIONS = [
    ("--vipu-server-host", "10.1.3.101"),
    ("--vipu-server-port", "8090"),
    ("--vipu-server-timeout", "300"),
    ("--vipu-partition", "pod64"),
    ("--vipu-partition-attempts", "2"),
    ("--vipu-cluster", "c"),
    ("--vipu-allocation", "a"),
    ("--update-partition", "yes"),
    ("--reset-partition", "no"),
    ("--remove-partition", "1"),
    ("--num-ilds", "2"),
    ("--sync-type", "ST_POD_NATIVE_DEFAULT"),
    ("--host-subnet", "10.1.3.0/24"),
    ("--process-placement", "disabled"),
]


@pytest.mark.parametrize(("flag", "value"), PARTITION_OPTIONS)
@pytest.mark.parametrize("form", ["equals", "space"])
def test_partition_options_are_accepted_and_reported(flag, value, form):
    words = [f"{flag}={value}"] if form == "equals" else [flag, value]
    options = parse_command_line([*words, "t.py"])
    assert options.no_effect == (flag,)
    assert options.program == ("t.py",)


@pytest.mark.parametrize(("words", "level"), [(["-v"], 1), (["-vv"], 2), (["--vv"], 2)])
def test_verbosity_spellings(words, level):
    assert parse_command_line([*words, "t.py"]).verbosity == level


def test_repeated_mpi_args_accumulate():
    options = parse_command_line(
        ["--mpi-global-args=--tag-output", "--mpi-global-args=--allow-run-as-root", "t.py"]
    )
    assert options.mpi_global_args == ("--tag-output", "--allow-run-as-root")


def test_emulator_options():
    options = parse_command_line(
        ["--real-hosts", "--offline-representative=yes", "--mpiexec", "/x/mpiexec", "t.py"]
    )
    assert options.real_hosts and options.offline_representative
    assert options.mpiexec == "/x/mpiexec"


def test_hosts_argument_places_consecutive_instances_per_host():
    assert hosts_argument("hydra", ("a", "b"), 2) == ["-hosts", "a:2,b:2"]
    assert hosts_argument("openmpi", ("a", "b"), 3) == ["--host", "a:3,b:3", "--map-by", "slot"]


def test_offline_capacity_is_bounded_by_cpus():
    assert 1 <= offline_capacity() <= 4 * len(os.sched_getaffinity(0))


def _prefix(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    mpiexec = tmp_path / "bin" / "mpiexec"
    mpiexec.write_text("#!/bin/sh\n")
    mpiexec.chmod(0o755)
    (tmp_path / "lib" / "libmpi.so").write_text("INPUT(libmpi.so.40)\n")  # a linker script
    (tmp_path / "lib" / "libmpi.so.40").write_bytes(b"\x7fELF" + bytes(60))
    return str(mpiexec)


def test_system_mpi_selection_and_its_libmpi(tmp_path):
    mpiexec = _prefix(tmp_path)
    assert find_mpiexec({"PATH": "", "POPDIST_EMU_MPIEXEC": mpiexec}) == mpiexec
    assert find_mpiexec({"PATH": ""}, explicit=mpiexec) == mpiexec
    assert find_libmpi(mpiexec, "", {}) == str(tmp_path / "lib" / "libmpi.so.40")
    with pytest.raises(UsageError, match="--mpiexec '/no/such' is not an executable"):
        find_mpiexec({"PATH": ""}, explicit="/no/such")
    with pytest.raises(UsageError, match=r"--libmpi '/no/lib\.so' does not exist"):
        find_libmpi(mpiexec, "/no/lib.so", {})
