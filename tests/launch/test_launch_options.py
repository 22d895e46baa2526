"""PopRun's command line as poprun-emu reads it: names, defaults, spellings, refusals."""

import pytest

from launch import LaunchOptions, UsageError, parse_command_line


def test_defaults_are_poprun_defaults():
    options = parse_command_line(["train.py"])
    assert options == LaunchOptions(program=("train.py",))
    assert (options.num_replicas, options.num_instances, options.ipus_per_replica) == (1, 1, 1)
    assert options.hosts == ("localhost",)
    assert options.only_output_from_instance is None


def test_options_in_both_spellings():
    options = parse_command_line(
        [
            "--num-replicas=16",
            "--num-instances",
            "4",
            "--ipus-per-replica=2",
            "-H",
            "host[0-1]",
            "--only-output-from-instance",
            "3",
            "--system",
            "POD64",
            "--report-dir=/tmp/r",
            "-vv",
            "train.py",
        ]
    )
    assert options.num_replicas == 16
    assert options.num_instances == 4
    assert options.ipus_per_replica == 2
    assert options.hosts == ("host0", "host1")
    assert options.only_output_from_instance == 3
    assert options.system == "POD64"
    assert options.report_dir == "/tmp/r"
    assert options.verbosity == 2


def test_short_host_option_attached():
    assert parse_command_line(["-Ha,b", "x.py"]).hosts == ("a", "b")


def test_parsing_stops_at_the_program():
    options = parse_command_line(
        ["--num-replicas", "2", "python3", "-u", "train.py", "--num-replicas", "8", "-v"]
    )
    assert options.num_replicas == 2
    assert options.verbosity == 0
    assert options.program == ("python3", "-u", "train.py", "--num-replicas", "8", "-v")


def test_double_dash_ends_the_options():
    assert parse_command_line(["-v", "--", "-weird-name"]).program == ("-weird-name",)


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["--numa-aware", "train.py"], True),
        (["--numa-aware=yes", "train.py"], True),
        (["--numa-aware", "1", "train.py"], True),
        (["--numa-aware", "no", "train.py"], False),
        (["--numa-aware=False", "train.py"], False),
        (["--numa-aware=on", "train.py"], True),
    ],
)
def test_poprun_boolean_spellings(words, expected):
    options = parse_command_line(words)
    assert options.numa_aware is expected
    assert options.program == ("train.py",)


def test_a_bare_boolean_does_not_swallow_the_program():
    options = parse_command_line(["--print-topology", "python3", "train.py"])
    assert options.print_topology is True
    assert options.program == ("python3", "train.py")


def test_offline_mode_and_print_topology():
    options = parse_command_line(["--offline-mode", "--print-topology=yes", "t.py"])
    assert options.offline_mode and options.print_topology


def test_vipu_options_are_accepted_and_listed_once():
    options = parse_command_line(
        [
            "--vipu-server-host=h",
            "--vipu-server-timeout",
            "600",
            "--vipu-partition=p",
            "--update-partition=yes",
            "--reset-partition=no",
            "--num-ilds=2",
            "--vipu-partition=q",
            "t.py",
        ]
    )
    assert options.no_effect == (
        "--vipu-server-host",
        "--vipu-server-timeout",
        "--vipu-partition",
        "--update-partition",
        "--reset-partition",
        "--num-ilds",
    )


def test_mpi_args_are_split_into_words():
    options = parse_command_line(
        [
            '--mpi-global-args=--tag-output --mca btl_tcp_if_include "10.0.0.0/16"',
            "--mpi-local-args",
            "-x PATH -x A=1",
            "t.py",
        ]
    )
    assert options.mpi_global_args == ("--tag-output", "--mca", "btl_tcp_if_include", "10.0.0.0/16")
    assert options.mpi_local_args == ("-x", "PATH", "-x", "A=1")


def test_help_and_version_need_no_program():
    assert parse_command_line(["--help"]).help
    assert parse_command_line(["-h"]).help
    assert parse_command_line(["--version"]).version


@pytest.mark.parametrize(
    ("words", "match"),
    [
        (["--bogus", "t.py"], "unknown option --bogus"),
        (["--num-replica=4", "t.py"], "unknown option --num-replica"),
        (["-x", "t.py"], "unknown option -x"),
        (["--num-replicas"], "--num-replicas needs a value"),
        (["--num-replicas", "four", "t.py"], "--num-replicas expects a whole number, got 'four'"),
        (["--numa-aware=maybe", "t.py"], "--numa-aware='maybe' is not a yes/no value"),
        (["--version-format=xml", "--version"], "not one of text, full-text, full-json"),
        (["--help=1"], "--help takes no value"),
        (["--mpi-global-args=--mca 'a", "t.py"], "balance its quotes"),
        (["-H", "a,,b", "t.py"], "empty host name"),
    ],
)
def test_refusals_name_the_value_and_the_fix(words, match):
    with pytest.raises(UsageError, match=match):
        parse_command_line(words)
