"""poprun-emu's refusals (one line, exit 2, before anything starts), --help and --version."""

import os
import re
import stat
import subprocess
import sys

import pytest
from deadlines import within

from launch import LaunchOptions, UsageError, help_text, launcher_version, main, validate


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def _refusal(capsys, words):
    code = main(words)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("poprun-emu: error: ")
    assert err.count("\n") == 1, err  # one line
    return err


@pytest.mark.parametrize(
    ("words", "match"),
    [
        (["--num-replicas", "6", "--num-instances", "4"], "--num-replicas 6 is not divisible by"),
        (["--num-replicas", "2", "--num-instances", "4"], "--num-instances 4 is more than"),
        (["--ipus-per-replica", "3"], "--ipus-per-replica 3 is not supported: use one of 1, 2"),
        (["--num-replicas", "3"], "= 3 IPUs, which is not a power of two"),
        (["--num-replicas", "3", "--num-instances", "3"], "not a power of two"),
        (["--num-replicas", "0"], "--num-replicas 0 must be at least 1"),
        (["--num-instances", "4", "--num-replicas", "4", "-H", "a,b,c"], "divided evenly among 3"),
        (
            ["--num-instances", "2", "--num-replicas", "2", "--only-output-from-instance", "2"],
            r"--only-output-from-instance 2 is outside \[0, 2\)",
        ),
        (["--only-output-from-instance", "-1"], r"--only-output-from-instance -1 is outside"),
        (["--frobnicate"], "unknown option --frobnicate"),
        (["--print-topology", "--mpi-local-args=-x"], "-x needs NAME or NAME=VALUE"),
        # Hydra is asked before launch (mpiexec ARGS --version) about options we do not know.
        (
            ["--num-replicas", "2", "--num-instances", "2", "--mpi-global-args=--bogus"],
            r"MPICH's mpiexec \(Hydra\) does not know 'bogus'",
        ),
    ],
)
def test_layout_and_option_refusals(capsys, script, words, match):
    err = _refusal(capsys, [*words, script])
    assert re.search(match, err), err


def test_no_program(capsys):
    assert "no program given" in _refusal(capsys, ["--num-replicas", "2"])


def test_missing_script(capsys, tmp_path):
    err = _refusal(capsys, [str(tmp_path / "nothere.py")])
    assert "does not exist" in err and "nothere.py" in err


def test_missing_script_of_an_interpreter(capsys, tmp_path):
    err = _refusal(capsys, ["python3", str(tmp_path / "nothere.py")])
    assert "python3's script" in err and "does not exist" in err


def test_a_directory_is_not_a_script(capsys, tmp_path):
    (tmp_path / "d.py").mkdir()
    assert "is not a file" in _refusal(capsys, [str(tmp_path / "d.py")])


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_unreadable_script(capsys, script):
    os.chmod(script, 0)
    assert "is not readable" in _refusal(capsys, [script])


def test_unknown_executable(capsys):
    assert "was not found on PATH" in _refusal(capsys, ["no-such-program-here-xyz"])


def test_executable_path_must_be_executable(capsys, tmp_path):
    assert "is not an executable file" in _refusal(capsys, [str(tmp_path / "nothere")])


def test_script_runs_with_this_interpreter(script, tmp_path):
    _, command = validate(LaunchOptions(program=(script, "--lr", "1")))
    assert command == [sys.executable, script, "--lr", "1"]
    plain = tmp_path / "plain"  # an existing, non-executable file without .py
    plain.write_text("print(1)\n")
    assert validate(LaunchOptions(program=(str(plain),)))[1] == [sys.executable, str(plain)]


def test_executables_keep_their_name(script):
    assert validate(LaunchOptions(program=("python3", script)))[1] == ["python3", script]


def test_validate_returns_the_layout(script):
    layout, _ = validate(LaunchOptions(num_replicas=8, num_instances=2, program=(script,)))
    assert (layout.num_local_replicas, layout.replica_offset(1)) == (4, 4)
    with pytest.raises(UsageError, match="not divisible"):
        validate(LaunchOptions(num_replicas=8, num_instances=3, program=(script,)))


def test_help_lists_poprun_options_and_says_hosts_are_simulated(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    flags = ("--num-replicas", "--ipus-per-replica", "--mpi-local-args", "--vipu-partition")
    for flag in (*flags, "--vv", "--sync-type", "--process-placement", "--real-hosts"):
        assert flag in out
    assert "Simulated by default" in out
    assert out == help_text()


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"poprun-emu {launcher_version()}\n"


def test_refusal_is_fast_and_starts_nothing(tmp_path):
    """A bad layout is refused in one line before anything starts, by a launcher that loads
    neither JAX nor MPI (which is why it takes a fraction of a second; the README gives the
    measured time: timings are not asserted here)."""
    probe = (
        "import sys\n"
        "from launch import main\n"
        "code = main(['--num-replicas', '6', '--num-instances', '4', 'python3', '-c', 'pass'])\n"
        "heavy = [m for m in ('jax', 'mpi4py.MPI', 'jaxlib') if m in sys.modules]\n"
        "print(code, heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=within(60),
        cwd=tmp_path,
    )
    assert out.stdout.strip() == "2 []", out.stdout + out.stderr
    assert "not divisible" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_exports_too_big_to_exec_are_refused_before_anything_starts(capsys, script, tmp_path):
    # 9,000 -x exports: the job's configuration (one variable) passes MAX_ARG_STRLEN.
    exports = " ".join(f"-x A{i}=1" for i in range(9000))
    marker = tmp_path / "ran"
    program = tmp_path / "p.py"
    program.write_text(f"open({str(marker)!r}, 'w').close()\n")
    err = _refusal(capsys, ["--mpi-local-args", exports, str(program)])
    assert "the kernel execs at most" in err and "export fewer or shorter variables" in err
    assert not marker.exists()


def test_import_and_export_config_refusals_are_one_line(capsys, script, tmp_path):
    err = _refusal(capsys, ["--import-config=/dev/zero", script])
    assert "a character device, not a regular file" in err
    os.mkfifo(tmp_path / "fifo")
    err = _refusal(capsys, [f"--import-config={tmp_path}/fifo", script])
    assert "a FIFO, not a regular file" in err
    err = _refusal(capsys, [f"--export-config={tmp_path}/fifo", "--overwrite-config=yes", script])
    assert "cannot be written (a FIFO that no process reads)" in err
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    err = _refusal(capsys, [f"--export-config={tmp_path}/no/c.json", script])
    assert "does not exist" in err
    err = _refusal(capsys, ["-H", "h[0-" + "9" * 5000 + "]", script])
    assert len(err) < 300
