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
    assert [d.split(" (")[0] for d in adapted.dropped] == ["--mca oob_tcp_if_include 10.10.0.0/16"]
    assert adapted.translated == ("--tag-output", "--allow-run-as-root", "--bind-to none")


def test_openmpi_keeps_its_options_but_those_poprun_emu_does_itself():
    adapted = adapt_mpi_args(POPRUN_GLOBAL, "openmpi", {})
    assert adapted.args == ("--mca", "oob_tcp_if_include", "10.10.0.0/16", "-verbose")
    assert adapted.dropped == ()
    socket = adapt_mpi_args(("--bind-to", "socket"), "openmpi", {})
    assert [d.split(" (")[0] for d in socket.dropped] == ["--bind-to socket"]


@pytest.mark.parametrize("flavour", ["hydra", "openmpi"])
def test_translations_hold_under_every_mpi(flavour, tmp_path):
    adapted = adapt_mpi_args(
        ("--output-filename", str(tmp_path / "logs"), "--bind-to", "core", "-x=A=1"),
        flavour,
        {},
    )
    assert adapted.output_dir == str(tmp_path / "logs")
    assert adapted.args == () and adapted.dropped == ()
    assert adapted.exports == (("A", "1"),)
    equals_form = adapt_mpi_args((f"--output-filename={tmp_path}",), flavour, {})
    assert equals_form.output_dir == str(tmp_path)


@pytest.mark.parametrize("words", [("-np", "4"), ("--host", "a,b"), ("--hostfile", "h")])
def test_options_that_contradict_the_layout_are_refused(words):
    with pytest.raises(UsageError, match=f"MPI argument {words[0]} cannot be honoured"):
        adapt_mpi_args(words, "hydra", {})


def test_hydra_options_pass_through_with_their_values():
    adapted = adapt_mpi_args(("-genv", "A", "1", "-iface", "lo", "-prepend-rank"), "hydra", {})
    assert adapted.args == ("-genv", "A", "1", "-iface", "lo", "-prepend-rank")


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


@pytest.mark.parametrize(
    ("words", "match"),
    [
        (("-x", "=v"), "-x '' is not a variable name"),
        (("-x=1A=2",), "-x '1A' is not a variable name"),
        (("-x", "POPDIST_EMU_BOOTSTRAP={}"), "poprun-emu sets POPDIST_EMU_BOOTSTRAP for each"),
        (("-x", "POPDIST_NUM_TOTAL_REPLICAS=4"), "sets POPDIST_NUM_TOTAL_REPLICAS"),
        (("-genv", "POPDIST_EMU_BOOTSTRAP", "{}"), "-genv POPDIST_EMU_BOOTSTRAP: poprun-emu"),
        (("-genvlist", "A,POPDIST_EMU_INSTANCE_INDEX"), "sets POPDIST_EMU_INSTANCE_INDEX"),
        ((":", "-n", "1", "other"), "':' starts another program"),
        (("-prepend-rank", "stray"), "'stray' is neither an option nor an option's value"),
        (("stray",), "'stray' is neither an option"),
    ],
)
def test_exports_and_words_mpiexec_would_misread_are_refused(words, match):
    """-x =v exported a variable with no name, -genv POPDIST_EMU_BOOTSTRAP {} broke the
    bootstrap with a KeyError traceback, and a bare word or ':' reached mpiexec (rc 255)."""
    with pytest.raises(UsageError, match=match):
        adapt_mpi_args(words, "hydra", {})


def test_an_unknown_option_keeps_its_value_for_the_mpi_to_judge():
    adapted = adapt_mpi_args(("-outfile-pattern", "out.%r", "-prepend-rank"), "hydra", {})
    assert adapted.args == ("-outfile-pattern", "out.%r", "-prepend-rank")
    assert adapted.unknown == ("-outfile-pattern",)
