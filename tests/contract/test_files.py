"""Atomic writes: the old file or the whole new one, never a part; symlinks not followed;
special files written in place or refused, never replaced."""

import errno
import os
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest
from deadlines import within

from contract import (
    FileTooLargeError,
    atomic_write,
    make_directories,
    open_for_appending_lines,
    output_problem,
    read_bounded,
    write_atomically,
)


def test_write_creates_the_file_with_open_permissions(tmp_path):
    path = tmp_path / "a.json"
    write_atomically(path, "{}\n")
    assert path.read_text() == "{}\n"
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~_umask()
    assert os.listdir(tmp_path) == ["a.json"]


def test_failed_write_keeps_the_previous_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "p.npz"
    write_atomically(path, b"good")
    with pytest.raises(RuntimeError, match="disk full"), atomic_write(path) as f:
        f.write(b"half")
        raise RuntimeError("disk full")
    assert path.read_bytes() == b"good"
    assert os.listdir(tmp_path) == ["p.npz"]


def test_symlink_at_the_destination_is_replaced_not_followed(tmp_path):
    target = tmp_path / "target"
    target.write_text("precious")
    link = tmp_path / "summary.json"
    link.symlink_to(target)
    write_atomically(link, "report")
    assert target.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "report"


def test_bad_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="mode"), atomic_write(tmp_path / "x", "a"):
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# A real failure of the OS, in a child process: the file size limit (RLIMIT_FSIZE) makes the
# write fail with EFBIG half-way, as a full disk would; or the writer is SIGKILLed mid-write.
_WRITER = """
import resource, signal, sys, time
import numpy as np
from contract import atomic_write

path, how = sys.argv[1], sys.argv[2]
arrays = {"w": np.ones(200_000, np.float32)}
if how == "disk-full":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a fatal signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    with atomic_write(path, "wb") as f:
        np.savez(f, **arrays)
else:
    with atomic_write(path, "wb") as f:
        f.write(b"partial")
        f.flush()
        print("writing", flush=True)
        time.sleep(60)
"""


def _good_file(path):
    np.savez(path, w=np.arange(5.0))
    return path.read_bytes()


def test_a_write_that_fails_for_lack_of_space_keeps_the_old_file(tmp_path):
    path = tmp_path / "good.npz"
    before = _good_file(path)
    proc = subprocess.run(
        [sys.executable, "-c", _WRITER, str(path), "disk-full"],
        capture_output=True,
        text=True,
        timeout=within(120),
    )
    assert proc.returncode != 0 and "File too large" in proc.stderr, proc.stderr[-2000:]
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["good.npz"]


def test_a_writer_killed_mid_write_keeps_the_old_file_and_its_temporary_goes_next_time(tmp_path):
    path = tmp_path / "good.npz"
    before = _good_file(path)
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), "kill"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline() == "writing\n"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=within(60))
    assert path.read_bytes() == before
    with np.load(path) as saved:
        np.testing.assert_array_equal(saved["w"], np.arange(5.0))
    assert len(os.listdir(tmp_path)) == 2  # the dead writer's temporary
    write_atomically(path, b"new")
    assert os.listdir(tmp_path) == ["good.npz"] and path.read_bytes() == b"new"


def test_read_bounded_stops_after_its_bound(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    assert read_bounded(tmp_path / "f", 3) == b"abc"
    with pytest.raises(FileTooLargeError):
        read_bounded(tmp_path / "f", 2)
    with pytest.raises(OSError, match="a character device, not a regular file"):
        read_bounded("/dev/zero", 1 << 20)  # a device without end: refused, not read


def test_read_bounded_refuses_a_fifo_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO, not a regular file"):
        read_bounded(fifo, 100)  # open() alone would block until a writer came


def test_output_problem_tries_a_probe_and_leaves_nothing(tmp_path):
    assert output_problem(tmp_path / "new" / "deeper", directory=True) is None
    assert output_problem(tmp_path / "f.json", directory=False) is None
    assert os.listdir(tmp_path) == []  # the probe file was removed, nothing was made
    assert "'/proc' cannot take a new file" in output_problem("/proc/x/y", directory=True)
    (tmp_path / "link").symlink_to(tmp_path)
    assert "is a symbolic link" in output_problem(tmp_path / "link", directory=True)
    assert "is a symbolic link" in output_problem(tmp_path / "link", directory=False)


def test_open_for_appending_lines_refuses_a_symlink(tmp_path):
    (tmp_path / "victim").write_text("keep")
    (tmp_path / "log").symlink_to(tmp_path / "victim")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        open_for_appending_lines(tmp_path / "log")
    assert (tmp_path / "victim").read_text() == "keep"
    with open_for_appending_lines(tmp_path / "real") as f:
        f.write(b"x\n")
    assert (tmp_path / "real").read_text() == "x\n"


def test_make_directories_checks_every_part_from_its_base(tmp_path):
    make_directories(tmp_path / "logs" / "1" / "rank.0", base=tmp_path / "logs")
    assert (tmp_path / "logs" / "1" / "rank.0").is_dir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "logs" / "2").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PermissionError, match="2' is a symbolic link"):
        make_directories(tmp_path / "logs" / "2" / "rank.0", base=tmp_path / "logs")
    assert list((tmp_path / "elsewhere").iterdir()) == []
    (tmp_path / "logs" / "3").mkdir(mode=0o777)
    os.chmod(tmp_path / "logs" / "3", 0o777)
    with pytest.raises(PermissionError, match="is world-writable"):
        make_directories(tmp_path / "logs" / "3" / "x", base=tmp_path / "logs")


# --- Destinations that are not regular files: written in place or refused, never replaced ---
ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")


def _device(path, minor):
    """A character device node in the test's own directory (1, minor: null 3, full 7)."""
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    return path


@ROOT
def test_a_character_device_is_written_in_place_and_stays_a_device(tmp_path):
    null = _device(tmp_path / "null", 3)
    link = tmp_path / "to-null"
    link.symlink_to(null)
    write_atomically(null, "{}\n")
    write_atomically(link, "{}\n")
    assert stat.S_ISCHR(os.lstat(null).st_mode) and link.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["null", "to-null"]


@ROOT
def test_a_full_device_fails_the_write_and_stays_a_device(tmp_path):
    full = _device(tmp_path / "full", 7)
    with pytest.raises(OSError) as error:
        write_atomically(full, "x" * 100_000)
    assert error.value.errno == errno.ENOSPC
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_a_fifo_with_a_reader_is_written_and_one_without_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO that no process reads"):
        write_atomically(fifo, "lost")
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:  # until cat has opened its end
        try:
            write_atomically(fifo, "read\n")
            break
        except OSError:
            assert time.monotonic() < deadline, "cat never opened the FIFO"
            time.sleep(0.05)
    assert reader.communicate(timeout=within(30))[0] == b"read\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_link_to_an_open_file_descriptor_is_written_through(tmp_path):
    """``/dev/fd/N`` and ``/dev/stdout`` point into ``/proc/self/fd``: the stream is written,
    the link is not replaced (the link is read, never written, so /dev is untouched)."""
    read_end, write_end = os.pipe()
    try:
        write_atomically(f"/dev/fd/{write_end}", "through the pipe")
        os.close(write_end)
        assert os.read(read_end, 100) == b"through the pipe"
    finally:
        os.close(read_end)


def test_a_directory_destination_is_refused_in_words(tmp_path):
    with pytest.raises(OSError, match="a directory, not a regular file"):
        write_atomically(tmp_path, "x")
