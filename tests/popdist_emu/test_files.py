"""Atomic writes: the old file or the whole new one, never a part; symlinks not followed."""

import os

import pytest

from popdist_emu._files import atomic_write, write_atomically


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
