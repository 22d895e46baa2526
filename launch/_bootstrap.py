"""Runs inside every MPI rank: sets up one PopRun instance and runs the program as its child.

``python -m launch._bootstrap -- program [args]``, with the job in the ``POPDIST_EMU_BOOTSTRAP``
variable (JSON written by the launcher). The bootstrap imports neither JAX nor mpi4py: the
child is the MPI process (MPICH's ``PMI_FD`` stays open for it). It

- exports the instance's ``POPDIST_*`` environment and the emulator's ``POPDIST_EMU_*``;
- pins itself, and so the child, to ONE CPU (round-robin by local rank) and makes XLA and the
  BLAS libraries single-threaded, because XLA sizes its thread pool from the CPUs a process may
  use and that changes float bits: every instance computes under the same CPU allowance;
- puts the ``popdist`` shim on PYTHONPATH, so ``import popdist`` works inside instances only;
- tags each output line as Open MPI's ``--tag-output`` does (``[1,<i>]<stdout>:``) when
  several instances print (or ``--tag-output`` is given), or with
  ``--only-output-from-instance K`` passes K's output untagged and silences the others;
- keeps the last lines of the child's stderr, whatever the output mode, and writes them to
  ``$JOB_DIR/instance-<i>.stderr`` when the child fails, so the launcher can show them (even
  for one silenced by ``--only-output-from-instance``); none when the child's traceback
  already reached the terminal, so that each failure's traceback is printed once;
- writes the child's exit status (``Popen.returncode``) to ``$JOB_DIR/instance-<i>.status``
  for the launcher's watchdog, forwards SIGTERM/SIGINT, and exits with the child's code.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import BinaryIO

from contract import ENV_BOOTSTRAP, JobConfig, read_job_config
from launch._job import (
    HEARTBEAT_SECONDS,
    instance_environment,
    pid_path,
    pid_space,
    status_path,
    write_atomically,
)
from launch._orphan_watch import death_signal_blocked
from launch._output import open_log
from launch._watchdog import tail_path

_LINE_END = re.compile(rb"\r\n|\n|\r")
TAIL_LINES = 12  # stderr lines kept per instance for the launcher's failure message
_TRACEBACK = b"Traceback (most recent call last):"  # the first line Python prints of one
# Rank variables of MPICH Hydra, Open MPI and PMIx launchers, in that order.
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
_LOCAL_RANK_VARIABLES = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_LOCAL_RANK")


def _first_int(environ: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        if environ.get(name, "").strip().isdigit():
            return int(environ[name])
    return None


def _pin_to_one_cpu(local_index: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[local_index % len(cpus)]})


def _segments(source: io.BufferedIOBase) -> Iterator[bytes]:
    """The child's output as it arrives, cut after every newline and carriage return: a
    progress bar redraws its line with ``\r``, and each redraw must pass at once."""
    pending = b""
    while chunk := source.read1(65536):
        pending += chunk
        start = 0
        for match in _LINE_END.finditer(pending):
            yield pending[start : match.end()]
            start = match.end()
        pending = pending[start:]
    if pending:
        yield pending


def _pump(
    source: io.BufferedIOBase,
    sink: BinaryIO | None,
    tag: bytes,
    tail: collections.deque | None = None,
    log: BinaryIO | None = None,
    traceback_shown: threading.Event | None = None,
) -> None:
    """Copies lines from the child's pipe to ours (None: drop them), each with ``tag`` (a
    line a progress bar redraws with ``\r`` keeps its tag); keeps the last whole lines in
    ``tail``, with ``--output-filename`` writes them untagged to the instance's log, and
    sets ``traceback_shown`` once a Python traceback's first line went to ``sink``."""
    broken = False
    for line in _segments(source):
        if tail is not None and not line.endswith(b"\r"):
            tail.append(line)
        if log is not None:
            log.write(line)
        if sink is None or broken:
            continue  # keep draining, so that the child never blocks on a full pipe
        try:
            sink.write(tag + (line if line.endswith((b"\n", b"\r")) else line + b"\n"))
            sink.flush()
            if traceback_shown is not None and line.startswith(_TRACEBACK):
                traceback_shown.set()
        except OSError:  # mpiexec is gone; nobody reads our output any more
            broken = True
    source.close()
    if log is not None:
        log.close()


def _is_running(pid: int) -> bool:
    """Whether ``pid`` runs; a killed launcher its parent has not reaped yet (a zombie) does
    not."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: fall back to existence
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _end(child: subprocess.Popen) -> None:
    """SIGTERM to the program, SIGKILL if it has not ended 5 s later."""
    child.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=5)
    if child.poll() is None:
        child.kill()


def _watch_launcher(launcher_pid: int, child: subprocess.Popen) -> None:
    """Ends the child if the launcher dies without ending the job (e.g. SIGKILL): a job
    whose launcher is gone has no one to report to, so it must not run on unseen."""
    while child.poll() is None:
        time.sleep(1.0)
        if not _is_running(launcher_pid):
            _end(child)
            return


def _watch_parent(parent: int, child: subprocess.Popen, orphaned: threading.Event) -> None:
    """Ends the child when the process that started this bootstrap dies (MPICH's
    ``hydra_pmi_proxy`` or Open MPI's daemon, killed): this bootstrap is then re-parented,
    mpiexec keeps waiting on the dead proxy's connections instead of exiting, and the
    launcher would learn nothing until the program finished by itself."""
    while child.poll() is None:
        time.sleep(HEARTBEAT_SECONDS)
        if os.getppid() != parent:
            orphaned.set()
            _end(child)
            return


def _heartbeat(job_dir: str, instance: int, child: subprocess.Popen) -> None:
    """Renews the pid file's modification time while the program runs: the launcher's sign
    that this instance lives, where it cannot see the process (another host)."""
    path = pid_path(job_dir, instance)
    while child.poll() is None:
        time.sleep(HEARTBEAT_SECONDS)
        try:
            os.utime(path)
        except OSError:  # the job directory is gone: the launcher ended the job
            return


def _with_runner(program: list[str]) -> list[str]:
    """A script run by this interpreter goes through ``launch._runner``, which tells the
    launcher a failing exit code before MPI's finalisation can hold it back."""
    if len(program) >= 2 and program[0] == sys.executable and program[1].endswith(".py"):
        return [sys.executable, "-m", "launch._runner", *program[1:]]
    return program


def run_instance(program: list[str], config: JobConfig) -> int:
    """Runs ``program`` as this rank's instance; returns the exit code for this process."""
    forced = config.instance
    instance = forced if forced is not None else _first_int(os.environ, _RANK_VARIABLES)
    if instance is None:
        print(
            "poprun-emu bootstrap: no MPI rank variable (PMI_RANK, OMPI_COMM_WORLD_RANK, "
            "PMIX_RANK) is set: start instances through poprun-emu, not directly.",
            file=sys.stderr,
        )
        return 2
    local_index = _first_int(os.environ, _LOCAL_RANK_VARIABLES)
    _pin_to_one_cpu(instance if local_index is None or forced is not None else local_index)
    job_dir = config.job_dir
    parent = os.getppid()  # mpiexec's process manager, watched while the program runs
    # A process group of our own (MPICH already gives each rank a session), so the watchdog
    # can end this instance and everything it started with one killpg.
    if os.getpgrp() != os.getpid():
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
    try:
        write_atomically(pid_path(job_dir, instance), f"{os.getpid()} {os.getpgrp()}\n")
    except FileNotFoundError:  # the launcher died and another instance cleaned up
        return 1

    only = config.only_output_from
    shown = only is None or only == instance
    # Tags tell several instances' lines apart: none when one instance prints, always under
    # an explicit --tag-output (as mpirun's).
    several = config.instance is None and config.layout.num_instances > 1
    tagged = only is None and (several or config.tag_output)
    output_dir = config.output_dir
    # stderr always comes through a pipe, for its last lines; stdout when tagged or logged.
    stdout = subprocess.PIPE if tagged or output_dir else None if shown else subprocess.DEVNULL
    stderr = subprocess.PIPE
    try:  # before the program starts: a log that cannot be opened ends nothing half-way
        error_log = open_log(output_dir, instance, "stderr") if output_dir else None
        log = open_log(output_dir, instance, "stdout") if output_dir else None
    except OSError as error:
        print(
            f"[1,{instance}]<stderr>:poprun-emu: --output-filename {output_dir!r}: cannot open "
            f"{error.filename!r} ({error.strerror}); remove it or pick another directory.",
            file=sys.stderr,
            flush=True,
        )
        write_atomically(status_path(job_dir, instance), "2\n")
        return 2
    pmi_fd = os.environ.get("PMI_FD", "")
    try:
        with death_signal_blocked():  # launch._orphan_watch: the program waits for it
            child = subprocess.Popen(
                _with_runner(program),
                env=instance_environment(config, instance, os.environ),
                stdout=stdout,
                stderr=stderr,
                pass_fds=(int(pmi_fd),) if pmi_fd.isdigit() else (),  # MPICH's PMI connection
            )
    except OSError as error:
        print(
            f"[1,{instance}]<stderr>:poprun-emu: cannot start {program[0]!r}: {error}; check "
            f"that it is an executable on PATH.",
            file=sys.stderr,
            flush=True,
        )
        write_atomically(status_path(job_dir, instance), "127\n")  # as a shell's "not found"
        return 127

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)

    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    tag = f"[1,{instance}]<stderr>:".encode() if tagged else b""
    traceback_shown = threading.Event()
    error_pump = threading.Thread(
        target=_pump,
        args=(
            child.stderr,
            sys.stderr.buffer if shown else None,
            tag,
            tail,
            error_log,
            traceback_shown,
        ),
        daemon=True,
    )
    pumps = [error_pump]
    if tagged or output_dir:
        tag = f"[1,{instance}]<stdout>:".encode() if tagged else b""
        sink = sys.stdout.buffer if shown else None
        pumps.append(
            threading.Thread(target=_pump, args=(child.stdout, sink, tag, None, log), daemon=True)
        )
    launcher_pid = config.launcher_pid
    # Only where the launcher's pid means the launcher: on another host it is someone else's.
    watched = isinstance(launcher_pid, int) and config.launcher_pid_space == pid_space()
    watchers = [threading.Thread(target=_heartbeat, args=(job_dir, instance, child), daemon=True)]
    orphaned = threading.Event()
    if config.instance is None:  # started by mpiexec's process manager, not the launcher
        watchers.append(
            threading.Thread(target=_watch_parent, args=(parent, child, orphaned), daemon=True)
        )
    if watched:
        watchers.append(
            threading.Thread(target=_watch_launcher, args=(launcher_pid, child), daemon=True)
        )
    for thread in (*pumps, *watchers):
        thread.start()
    code = child.wait()  # retried after a forwarded signal (PEP 475)
    if code != 0:
        error_pump.join(timeout=1)  # the last lines, unless a grandchild holds the pipe
    if orphaned.is_set():
        code = 1
        tail.append(
            f"poprun-emu: the MPI process manager of instance {instance} (pid {parent}) died; "
            f"its program was ended\n".encode()
        )
    # The job directory is gone only if the launcher died and another instance removed it.
    with contextlib.suppress(FileNotFoundError):
        if code != 0:  # the launcher's recap: none after a traceback the terminal showed
            recap = b"" if traceback_shown.is_set() else b"".join(list(tail))
            write_atomically(tail_path(job_dir, instance), recap)
        write_atomically(status_path(job_dir, instance), f"{code}\n")
    for thread in pumps:
        thread.join(timeout=5)  # a grandchild holding the pipes must not keep us alive
    if isinstance(launcher_pid, int) and watched and not _is_running(launcher_pid):
        shutil.rmtree(job_dir, ignore_errors=True)  # the launcher can no longer do it
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m launch._bootstrap -- program [args]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    config = read_job_config()
    if config is None or not argv:
        print(
            f"poprun-emu bootstrap: {ENV_BOOTSTRAP} is unset or no program was given: this "
            f"module is started by poprun-emu; run poprun-emu [options] program instead.",
            file=sys.stderr,
        )
        return 2
    return run_instance(argv, config)


if __name__ == "__main__":
    sys.exit(main())
