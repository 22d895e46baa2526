"""Checks before launch: output paths, memory per instance, the collective timeout and the
compute device, each refused in one line with exit code 2; the variables they export."""

import os

import pytest

from launch import UsageError
from launch._preflight import (
    INSTANCE_BYTES,
    _gpu_present,
    check_memory,
    check_output_dir,
    collective_timeout,
    compute_device_exports,
)


def test_collective_timeout_values():
    assert collective_timeout("") is None
    assert collective_timeout("2.5") == 2.5
    assert collective_timeout("1") == 1.0
    # One rule for every number: ASCII digits, no exponent, at least a second.
    bad = ("0", "-1", "nan", "inf", "soon", "1e9", "\uff11\uff10", "1_0", "1e-300", "1e-9", "0.5")
    for text in bad:
        with pytest.raises(UsageError, match="from 1 to 604800 in ASCII digits"):
            collective_timeout(text)


def test_the_cpu_is_the_default_device_and_the_gpu_is_shared_without_preallocation():
    assert compute_device_exports("cpu") == (("JAX_PLATFORMS", "cpu"),)
    if _gpu_present():
        exports = dict(compute_device_exports("gpu"))
        assert exports == {"JAX_PLATFORMS": "gpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    else:
        with pytest.raises(UsageError, match="no GPU device"):
            compute_device_exports("gpu")


def test_output_directories(tmp_path):
    check_output_dir("--report-dir", str(tmp_path))
    check_output_dir("--report-dir", str(tmp_path / "new" / "deeper"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file, not a directory"):
        check_output_dir("--report-dir", str(tmp_path / "file"))
    with pytest.raises(UsageError, match="is a file, not a directory"):
        check_output_dir("--report-dir", str(tmp_path / "file" / "sub"))
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(UsageError, match="cannot take a new file"):
            check_output_dir("--report-dir", str(locked / "r"))


def test_output_directories_that_pass_as_root_but_cannot_be_written_are_tried(tmp_path):
    # /proc's permission bits let root through; creating a file there fails all the same.
    with pytest.raises(UsageError, match="'/proc' cannot take a new file"):
        check_output_dir("--report-dir", "/proc/reports")
    assert not os.path.exists("/proc/reports")


def test_output_directories_refuse_symlinks_and_directories_others_can_write(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UsageError, match="is a symbolic link"):
        check_output_dir("--report-dir", str(tmp_path / "link"))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UsageError, match="shared' is world-writable"):
        check_output_dir("--report-dir", str(shared / "r"))
    # Sticky, as /tmp is: others cannot remove or replace what we make there.
    shared.chmod(0o1777)
    check_output_dir("--report-dir", str(shared / "r"))
    if os.geteuid() == 0:  # only root can give a directory away
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        os.chown(foreign, 65534, 65534)
        with pytest.raises(UsageError, match="is owned by another user \\(uid 65534\\)"):
            check_output_dir("--report-dir", str(foreign / "r"))


def test_memory_per_instance():
    check_memory(4, available=4 * INSTANCE_BYTES)
    with pytest.raises(UsageError, match="--offline-mode"):
        check_memory(2048, available=64 * 2**30)


def test_cli_refuses_before_launch(poprun, tmp_path):
    program = tmp_path / "p.py"
    program.write_text("raise SystemExit('must not run')\n")
    (tmp_path / "a_file").write_text("x")
    for words, message in [
        (["--report-dir", "a_file"], "--report-dir 'a_file' is a file"),
        (["--num-replicas", "4096", "--num-instances", "2048"], "--offline-mode"),
        (["--collective-timeout", "0"], "--collective-timeout '0'"),
    ]:
        result = poprun(*words, str(program))
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.splitlines()) == 1


def test_instances_get_the_device_and_the_timeout(poprun, tmp_path):
    program = tmp_path / "env.py"
    program.write_text(
        "import os\nprint(os.environ['JAX_PLATFORMS'], os.environ.get('GCL_EMU_TIMEOUT'))\n"
    )
    result = poprun("--collective-timeout", "7.5", str(program))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "cpu 7.5\n"  # one instance: untagged
    # The user's own -x still wins over the default device.
    result = poprun("--mpi-local-args", "-x JAX_PLATFORMS=cpu,tpu", str(program))
    assert result.stdout.startswith("cpu,tpu ")
