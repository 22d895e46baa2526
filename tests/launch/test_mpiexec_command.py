"""The mpiexec command line: PopRun's Open MPI arguments adapted to the MPI in use."""

import pytest

from launch import UsageError, adapt_mpi_args, mpiexec_command

POPRUN_GLOBAL = (
    "--tag-output",
    "--allow-run-as-root",
    "--mca",
    "oob_tcp_if_include",
    "10.10.0.0/16",
    "--bind-to",
    "none",
    "-verbose",
)


def test_exports_from_x_options():
    adapted = adapt_mpi_args(
        ("-x", "A=1", "-x", "B", "-x", "UNSET_HERE", "-x", "C=x=y"), "hydra", {"B": "2"}
    )
    assert adapted.exports == (("A", "1"), ("B", "2"), ("C", "x=y"))
    assert adapted.args == ()


def test_openmpi_only_options_are_dropped_under_hydra():
    adapted = adapt_mpi_args(POPRUN_GLOBAL, "hydra", {})
    assert adapted.args == ("-verbose",)
    assert adapted.dropped == (
        "--tag-output",
        "--allow-run-as-root",
        "--mca oob_tcp_if_include 10.10.0.0/16",
        "--bind-to none",
    )


def test_openmpi_keeps_its_options_but_tag_output():
    adapted = adapt_mpi_args(POPRUN_GLOBAL, "openmpi", {})
    assert adapted.args == POPRUN_GLOBAL[1:]
    assert adapted.dropped == ("--tag-output",)


def test_x_without_a_name_is_refused():
    with pytest.raises(UsageError, match="-x needs NAME or NAME=VALUE"):
        adapt_mpi_args(("-x",), "hydra", {})


def test_hydra_command():
    command = mpiexec_command(
        "/bin/mpiexec",
        "hydra",
        num_instances=4,
        global_args=("-verbose",),
        local_args=("-envall",),
        bootstrap=("py", "-m", "launch._bootstrap", "--", "t.py"),
        is_root=True,
    )
    assert command == [
        "/bin/mpiexec",
        "-verbose",
        "-n",
        "4",
        "-envall",
        "py",
        "-m",
        "launch._bootstrap",
        "--",
        "t.py",
    ]


@pytest.mark.parametrize("is_root", [True, False])
def test_openmpi_command_unbinds_oversubscribes_and_allows_root(is_root):
    command = mpiexec_command(
        "mpirun",
        "openmpi",
        num_instances=2,
        global_args=(),
        local_args=(),
        bootstrap=("b",),
        is_root=is_root,
    )
    assert command[:4] == ["mpirun", "--bind-to", "none", "--oversubscribe"]
    assert ("--allow-run-as-root" in command) is is_root
    assert command[-3:] == ["-n", "2", "b"]
