"""How a child starts in its own session, whether a process lives (a zombie does not) and
how a process group past its bound is ended (contract/_processes.py), with real processes."""

import os
import signal
import subprocess
import sys
import time

from child_signals import with_default_signals
from deadlines import within
from zombies import zombie

from contract import ENDING_SIGNALS, end_process_group, pid_alive


def test_a_zombie_is_not_alive_though_signal_zero_reaches_it():
    """A killed bootstrap, launcher or checkpoint owner stays a zombie until its parent
    reaps it; ``kill(pid, 0)`` succeeds on it, which counted it alive."""
    child = zombie()
    try:
        os.kill(child.pid, 0)  # what pid_alive used to ask
        assert not pid_alive(child.pid)
    finally:
        child.wait(timeout=within(10))
    assert not pid_alive(child.pid)  # reaped: gone


def test_a_running_process_is_alive_and_no_pid_below_one_is():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert pid_alive(sleeper.pid) and pid_alive(os.getpid())
    finally:
        sleeper.kill()
        sleeper.wait(timeout=within(10))
    assert not pid_alive(0) and not pid_alive(-1)


# A group leader that ignores SIGTERM and starts a child that ignores it too; it prints the
# child's pid and sleeps.
STUBBORN = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace():
    leader = subprocess.Popen(
        [sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, start_new_session=True
    )
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    started = time.monotonic()
    try:
        assert end_process_group(leader, grace_s=0.5) == -signal.SIGKILL
        assert time.monotonic() - started < within(5)
        deadline = time.monotonic() + within(10)
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pid_alive(child)  # the whole group, not the leader alone
    finally:
        leader.stdout.close()
        for pid in (leader.pid, child):
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_group_that_obeys_sigterm_ends_without_sigkill():
    leader = subprocess.Popen(["sleep", "60"], start_new_session=True)
    assert end_process_group(leader, grace_s=within(10)) == -signal.SIGTERM


# Starts a child in its own session, sends itself SIGTERM before releasing the deferred
# signals, and says what happened in which order.
DEFERRED = """
import os, signal, subprocess
from contract import ending_signals_interrupt, interrupt_signal, start_session

with ending_signals_interrupt():
    try:
        child, release = start_session(
            ["sh", "-c", "grep SigBlk /proc/self/status"], stdout=subprocess.PIPE, text=True
        )
        os.kill(os.getpid(), signal.SIGTERM)
        print("held", child.pid == os.getsid(child.pid), flush=True)
        print(child.communicate(timeout=60)[0].split()[1], flush=True)
        release()
        print("released without the signal", flush=True)
    except KeyboardInterrupt as stop:
        print("interrupted by", interrupt_signal(stop), flush=True)
print("handler back", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
"""


def test_an_ending_signal_waits_until_the_started_session_is_held():
    """A SIGTERM that comes while a child in its own session starts acts only once the
    caller holds the child's handle (``release``), as ``KeyboardInterrupt(15)``; the child
    itself starts with nothing blocked, and the default handler comes back after the block.
    Before, the handler could raise inside ``Popen`` after the fork and lose the child."""
    result = subprocess.run(
        with_default_signals([sys.executable, "-c", DEFERRED], *ENDING_SIGNALS),
        capture_output=True,
        text=True,
        timeout=within(60),
    )
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stderr
    assert lines[0] == "held True", lines  # its own session, and the signal waited
    blocked = int(lines[1], 16)
    assert not any(blocked & (1 << (s - 1)) for s in ENDING_SIGNALS), lines[1]
    assert lines[2:] == ["interrupted by 15", "handler back True"], lines


def test_a_child_inherits_an_ignored_ending_signal_and_the_callers_mask():
    """Deferring the ending signals changes nothing the child inherits: SIGHUP ignored by
    the caller (as under ``nohup``) stays ignored in the child, and nothing is blocked."""
    script = (
        "import signal, subprocess\n"
        "from contract import start_session\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
        "child, release = start_session(['grep', '-E', '^Sig(Ign|Blk)', '/proc/self/status'],"
        " stdout=subprocess.PIPE, text=True)\n"
        "print(child.communicate(timeout=60)[0], end='')\n"
        "release()\n"
    )
    result = subprocess.run(
        with_default_signals([sys.executable, "-c", script], *ENDING_SIGNALS),
        capture_output=True,
        text=True,
        timeout=within(60),
    )
    assert result.returncode == 0, result.stderr
    masks = {line.split(":")[0]: int(line.split()[1], 16) for line in result.stdout.splitlines()}
    assert masks["SigIgn"] & (1 << (signal.SIGHUP - 1))
    assert not masks["SigBlk"] & sum(1 << (s - 1) for s in ENDING_SIGNALS)


def test_a_process_running_jax_starts_a_session_without_forking_itself():
    """``preexec_fn`` made ``Popen`` fork the caller, which in a process with JAX's threads
    drew JAX's 'os.fork() ... will likely lead to a deadlock' warning (and can deadlock)."""
    script = (
        "import jax.numpy as jnp\n"
        "from contract import start_session\n"
        "jnp.zeros(4).block_until_ready()  # JAX's threads run\n"
        "child, release = start_session(['true'])\n"
        "release()\n"
        "print('exit', child.wait(timeout=60))\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "default", "-c", script],
        capture_output=True,
        text=True,
        timeout=within(120),
    )
    assert result.returncode == 0 and result.stdout == "exit 0\n", result.stderr[-2000:]
    assert "os.fork()" not in result.stderr, result.stderr[-2000:]
