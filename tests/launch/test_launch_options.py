"""PopRun's command line as poprun-emu reads it: names, defaults, spellings, refusals."""

import json
import os

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
        (["--num-replica=4", "t.py"], "unknown option --num-replica: did you mean --num-replicas"),
        (["--ipus-per-replca", "2", "t.py"], "did you mean --ipus-per-replica"),
        (["--offline", "t.py"], "unknown option --offline: did you mean --offline-mode"),
        (["-x", "t.py"], "unknown option -x"),
        (["--num-replicas"], "--num-replicas needs a value"),
        (
            ["--num-replicas", "four", "t.py"],
            "--num-replicas expects a whole number in ASCII digits, got 'four'",
        ),
        (["--num-replicas", "1_6", "t.py"], "whole number in ASCII digits, got '1_6'"),
        (["--num-replicas", "\uff11\uff16", "t.py"], "whole number in ASCII digits"),
        (["--num-instances", "\u0661\u0666", "t.py"], "whole number in ASCII digits"),
        (["--num-replicas", "9" * 5000, "t.py"], "whole number in ASCII digits"),
        (["--num-replicas=2", "--num-replicas=4", "t.py"], "--num-replicas is given twice"),
        (["-H", "a", "--host", "b", "t.py"], r"--host is given twice \(also as -H\)"),
        (["--offline-mode", "--offline-mode=no", "t.py"], "--offline-mode is given twice"),
        (["-H", "h[0-" + "9" * 5000 + "]", "t.py"], "ASCII digits, at most 63"),
        (["-H", "h[\u0661-\u0662]", "t.py"], "is not N or N-M"),
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


def test_integers_in_ascii_digits_are_read():
    options = parse_command_line(["--num-replicas", "16", "--only-output-from-instance=-1", "t"])
    assert (options.num_replicas, options.only_output_from_instance) == (16, -1)


def test_accumulating_options_may_repeat():
    options = parse_command_line(
        ["-v", "-v", "--mpi-global-args=-x A=1", "--mpi-global-args=-x B=2", "t"]
    )
    assert options.verbosity == 2
    assert options.mpi_global_args == ("-x", "A=1", "-x", "B=2")


def _config(tmp_path, words):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(words))
    return str(path)


def test_a_config_word_that_is_not_an_option_is_refused(tmp_path):
    config = _config(tmp_path, ["--num-replicas=2", "oops", "--num-instances=2"])
    with pytest.raises(UsageError, match="'oops' is not an option"):
        parse_command_line([f"--import-config={config}", "t.py"])


def test_a_config_repeating_an_option_is_refused_the_command_line_overrides_it(tmp_path):
    config = _config(tmp_path, ["--num-replicas=2", "--num-replicas=4"])
    with pytest.raises(UsageError, match=r"^--import-config .*: --num-replicas is given twice"):
        parse_command_line([f"--import-config={config}", "t.py"])
    config = _config(tmp_path, ["--num-replicas=2"])
    assert (
        parse_command_line([f"--import-config={config}", "--num-replicas=4", "t"]).num_replicas == 4
    )


def test_a_config_is_read_up_to_arg_max_bytes(tmp_path):
    with pytest.raises(UsageError, match=r"'/dev/zero' cannot be read \(a character device"):
        parse_command_line(["--import-config=/dev/zero", "t.py"])
    big = tmp_path / "big.json"
    big.write_text(json.dumps(["-v"] * (os.sysconf("SC_ARG_MAX") // 5)))
    with pytest.raises(UsageError, match="holds more than"):
        parse_command_line([f"--import-config={big}", "t.py"])


def test_export_config_into_a_missing_directory_is_refused(tmp_path):
    target = tmp_path / "missing" / "c.json"
    with pytest.raises(UsageError, match=r"directory .*missing' does not exist"):
        parse_command_line([f"--export-config={target}", "t.py"])


def test_an_exported_config_of_an_overridden_import_reads_back(tmp_path):
    first = _config(tmp_path, ["--num-replicas=2", "--num-instances=2", "-v"])
    second = tmp_path / "second.json"
    words = [f"--import-config={first}", "--num-replicas=4", "-v", f"--export-config={second}"]
    parse_command_line([*words, "t.py"])
    assert json.loads(second.read_text()) == ["--num-instances=2", "-v", "--num-replicas=4", "-v"]
    again = parse_command_line([f"--import-config={second}", "t.py"])
    assert (again.num_replicas, again.num_instances, again.verbosity) == (4, 2, 2)


@pytest.mark.parametrize("option", ["--import-config={self}", "--export-config=out.json"])
def test_a_config_cannot_import_or_export_another(tmp_path, option):
    """One file, no chain: a config naming itself (or another) was accepted silently."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps([option.format(self=path), "--num-replicas=2"]))
    with pytest.raises(UsageError, match=r"a config cannot hold --(import|export)-config"):
        parse_command_line([f"--import-config={path}", "t.py"])
