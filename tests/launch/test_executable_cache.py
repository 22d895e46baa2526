"""The executable cache (JAX's persistent compilation cache): on by default in a per-user
directory, --executable-cache-path overrides it, a directory others can write (another
user's, our own world-writable one, /tmp) or a symlink is refused, and a second identical run
loads every program instead of compiling it."""

import os
import stat
import sys

import pytest

from launch import main
from launch._cache import default_cache_dir, executable_cache_dir
from launch._errors import UsageError


def test_default_is_per_user_and_honours_xdg_cache_home(tmp_path):
    assert default_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == str(
        tmp_path / "popdist-emu" / "jax"
    )
    home = os.path.expanduser("~")
    assert default_cache_dir({}) == os.path.join(home, ".cache", "popdist-emu", "jax")
    made = executable_cache_dir(None, {"XDG_CACHE_HOME": str(tmp_path)})
    assert made == str(tmp_path / "popdist-emu" / "jax")
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700  # private when we create it


def test_an_explicit_path_overrides_the_default(tmp_path):
    assert executable_cache_dir(str(tmp_path / "mine"), {}) == str(tmp_path / "mine")


def _foreign_world_writable(tmp_path):
    """A world-writable directory owned by another user, or None where we cannot make one."""
    if os.geteuid() == 0:
        path = tmp_path / "shared"
        path.mkdir()
        os.chown(path, 65534, 65534)
        os.chmod(path, 0o777)
        return path
    info = os.stat("/tmp")
    if info.st_mode & stat.S_IWOTH and info.st_uid != os.geteuid():
        return "/tmp"
    return None


def test_a_world_writable_directory_of_another_user_is_refused(tmp_path, capsys):
    foreign = _foreign_world_writable(tmp_path)
    if foreign is None:
        pytest.skip("no world-writable directory of another user can be made here")
    with pytest.raises(UsageError, match=r"owned by another user|writable by other users"):
        executable_cache_dir(str(foreign), {})
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not start')\n")
    code = main(["--executable-cache-path", str(foreign), "--num-replicas", "2", str(script)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--executable-cache-path" in err, err


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_our_own_directory_writable_by_others_is_refused(tmp_path, mode):
    path = tmp_path / "open"
    path.mkdir()
    os.chmod(path, mode)
    with pytest.raises(UsageError, match="is writable by other users: compiled code"):
        executable_cache_dir(str(path), {})


def test_tmp_itself_is_refused_even_as_root():
    with pytest.raises(UsageError, match=r"/tmp (is writable by other users|is owned by another)"):
        executable_cache_dir("/tmp", {})


def test_a_symlink_is_refused_and_its_target_left_alone(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    os.chmod(target, 0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="is a symbolic link"):
        executable_cache_dir(str(link), {})
    assert list(target.iterdir()) == []


def test_a_private_directory_is_accepted(tmp_path):
    path = tmp_path / "mine"
    path.mkdir(mode=0o700)
    assert executable_cache_dir(str(path), {}) == str(path)
    assert list(path.iterdir()) == []  # the probe file is removed


@pytest.mark.timeout(300)
def test_each_program_is_compiled_once_per_machine_and_not_again(poprun, tmp_path):
    job = tmp_path / "job.py"
    job.write_text(
        "import jax, numpy as np, optax, popdist_emu as p\n"
        "o = p.Options()\n"
        "t = p.Trainer(lambda w, b: ((b[0] @ w) ** 2).mean(), optax.sgd(0.1),\n"
        "              np.ones((4, 2), np.float32), o)\n"
        "print(t.step((np.ones((1, 1, o.replication_factor, 3, 4), np.float32),)))\n"
    )
    cache = str(tmp_path / "cache")
    layout = ("--num-replicas", "2", "--num-instances", "2")
    words = ("--executable-cache-path", cache, *layout, sys.executable, str(job))
    env = {"JAX_LOG_COMPILES": "1"}
    first = poprun(*words, env=env, timeout=240)
    second = poprun(*words, env=env, timeout=240)
    for run in (first, second):
        assert run.returncode == 0, run.stderr[-2000:]
    hits = "Persistent compilation cache hit"
    # JAX 0.7 and newer log the bare message; JAX 0.6 prefixes it with its logger's fields.
    programs = sum(
        line.startswith("[1,0]<stderr>:") and "Finished XLA compilation of " in line
        for line in first.stderr.splitlines()
    )
    assert programs >= 3  # the optimiser's init, the micro-step, the update
    # Cold: one instance compiles each program, the other loads it from the cache.
    assert first.stderr.count(hits) == programs, first.stderr
    # Warm: every program of every instance comes from the cache.
    assert second.stderr.count("Finished XLA compilation of ") == 2 * programs
    assert second.stderr.count(hits) == 2 * programs, second.stderr
