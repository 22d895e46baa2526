"""The launcher's watchdog: runs the job and ends all of it as soon as one instance fails.

mpiexec starts in a session of its own; every bootstrap records its process group in the job
directory (MPICH puts each rank in its own session, out of mpiexec's reach) and, when its
program ends, the exit status. The watchdog polls both: the first instance that exits non-zero
or dies ends the job (SIGTERM to every group, SIGKILL after a grace period), as mpi4py's
``-m mpi4py`` runner aborts the whole job on one rank's error, and names it with the last
lines of its stderr. Every wait has a timeout: once an instance has returned (exit 0), the
others must end within the collective timeout too. A peer may wait for it where no timeout of
ours reaches: in ``MPI_Init``, which under MPICH waits for every rank to initialise MPI (an
instance that exits before its first collective, say on an empty data shard, never does) and
holds the interpreter while it waits; so the job is ended naming the instance that returned.

A pid file is written where the program could overwrite it, so the watchdog signals only
process groups it has checked in ``/proc``: the recorded process leads the group it claims
and descends from the process the launcher started (mpiexec, or offline the bootstrap).
After the job, shared-memory segments its MPI left behind are removed (``_cleanup``).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from contract import ending_signals_interrupt, interrupt_signal, pid_alive, start_session
from launch._cleanup import remove_leftover_segments
from launch._exits import (
    InstanceExit,
    how_it_ended,
    others_were_running,
    read_exits,
    shell_code,
)
from launch._failure_text import (
    ended_by_mpiexec,
    left_early,
    returned_while_waited,
    unordered_kills,
)
from launch._host_watch import explain
from launch._job import (
    leaving_path,
    peer_left,
    pid_path,
    waiting_in_collectives,
)
from launch._job_output import GRACE_SECONDS, JobOutput
from launch._job_processes import (
    Groups,
    killed_first,
    session_members,
    stopped_bootstraps,
    stopped_instances,
    vanished,
)

POLL_SECONDS = 0.1  # 16 instances = 32 small reads per poll; cheap, and failures end in seconds


def tail_path(job_dir: str, instance: int) -> str:
    """Where instance ``instance``'s bootstrap leaves its last stderr lines for the launcher."""
    return os.path.join(job_dir, f"instance-{instance}.stderr")


def _signal_job(proc: subprocess.Popen, groups: Groups, sig: int) -> None:
    # An instance that reported its status is already on its way out; a signal now would only
    # make MPICH print a "BAD TERMINATION" banner about it.
    done = read_exits(groups.job_dir, groups.instances)
    targets = {pgid for i, (_, pgid) in groups().items() if i not in done}
    if proc.poll() is None:
        targets.add(proc.pid)  # mpiexec leads its own session (start_new_session=True)
    for pgid in targets:
        if pgid in (0, 1, os.getpgrp()):
            continue  # never our own group or init's
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
            if sig == signal.SIGTERM:  # a stopped process acts on SIGTERM once continued
                os.killpg(pgid, signal.SIGCONT)


def end_job(proc: subprocess.Popen, groups: Groups) -> None:
    """SIGTERM to mpiexec and every instance's group; SIGKILL whatever outlives the grace."""
    _signal_job(proc, groups, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None and not any(pid_alive(pid) for pid, _ in groups().values()):
            break
        time.sleep(POLL_SECONDS)
    _signal_job(proc, groups, signal.SIGKILL)
    for pid in session_members(proc.pid):  # mpiexec's ssh clients to a host that is gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    try:
        proc.wait(timeout=GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        print(f"poprun-emu: mpiexec (pid {proc.pid}) did not end after SIGKILL", file=sys.stderr)


def _report(message: str) -> None:
    print(f"poprun-emu: {message}", file=sys.stderr, flush=True)


def _report_tail(job_dir: str, instance: int) -> None:
    """The failing instance's last stderr lines (shown even if its output was silenced)."""
    try:
        with open(tail_path(job_dir, instance), "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return
    if lines:
        text = "".join(f"  | {line[:300]}\n" for line in lines)
        print(
            f"poprun-emu: last lines of instance {instance}'s stderr:\n{text}",
            end="",
            file=sys.stderr,
            flush=True,
        )


def run_job(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    job_dir: str,
    instances: Sequence[int],
    leave_timeout: float = math.inf,
    mpi_banner: bool = False,
    shown_alone: frozenset[int] = frozenset(),
    host_of: Sequence[str] = (),
) -> int:
    """Runs the job to its end and returns the launcher's exit code.

    Args:
        command: mpiexec (or, offline, the single bootstrap) and its arguments.
        env: the environment of ``command``.
        job_dir: where the bootstraps write ``instance-<i>.pid`` and ``instance-<i>.status``.
        instances: the instance indices expected to report.
        leave_timeout: seconds the others may run on after an instance exited 0 (the
            collective timeout); then the job is ended, naming the instance that returned.
        mpi_banner: pass on MPICH's termination banner (``-v``); by default it is hidden,
            since the launcher names the failed instance itself.
        shown_alone: instances whose output reaches the terminal with no other instance's
            (one instance, or ``--only-output-from-instance``): their last lines are already
            right above, so a failure of theirs is not followed by them again.
        host_of: with ``--real-hosts``, the host of each instance: every instance must start
            within ``leave_timeout`` of the launch, and a failure names the hosts that stopped
            answering or lost their instances (``launch._host_watch``).

    Returns:
        0 when every instance exited 0; the first failing instance's code (128+N for signal
        N); 130 after Ctrl-C; mpiexec's own code if it failed before the instances reported.
    """
    with ending_signals_interrupt():  # SIGTERM and SIGHUP end the job as Ctrl-C does
        return _run(
            command, env, job_dir, instances, leave_timeout, mpi_banner, shown_alone, host_of
        )


def _run(
    command: Sequence[str],
    env: Mapping[str, str],
    job_dir: str,
    instances: Sequence[int],
    leave_timeout: float,
    mpi_banner: bool,
    shown_alone: frozenset[int],
    host_of: Sequence[str],
) -> int:
    started_ns = time.time_ns() - 1_000_000_000  # ctime granularity and clock steps
    pipe = None if mpi_banner else subprocess.PIPE
    proc, release = start_session(command, env=dict(env), stdout=pipe, stderr=pipe)
    output = JobOutput(proc, sys.stdout.buffer, sys.stderr.buffer)
    groups = Groups(job_dir, instances, proc.pid)

    def end_job_and_output() -> None:
        end_job(proc, groups)
        output.drain()  # every line the job printed, before the launcher's own

    launched = time.monotonic()

    def end_on_hosts(exits: Mapping[int, InstanceExit], start: float = 0.0) -> list[int]:
        """Ends the job; with real hosts, says first what became of them (looked at before
        the job is ended) and returns the instances gone without a status, the cause."""
        if not host_of:
            end_job_and_output()
            return []
        lines, lost = explain(
            job_dir,
            host_of,
            [i for i in instances if i not in exits],
            lambda: read_exits(job_dir, instances).keys(),
            end_job_and_output,
            start,
            output.recent_errors,
        )
        for line in lines:
            _report(line)
        return lost

    seen_stopped: set[int] = set()  # looked for every second, to name them if the job fails
    bootstrap_stopped: dict[int, float] = {}  # instance -> since when its bootstrap is stopped
    returned: dict[int, float] = {}  # instance -> when its exit 0 was first seen (monotonic)
    next_scan = time.monotonic() + 1.0
    try:
        release()  # an ending signal that came while mpiexec started acts here
        while True:
            finished = proc.poll() is not None
            exits = read_exits(job_dir, instances)
            # A program ending with a failing status says so before MPI's finalisation, in
            # which a peer's collective could otherwise fail first and be named instead.
            leaving = {
                i: e
                for i, e in read_exits(job_dir, instances, leaving_path).items()
                if i not in exits and e.code != 0
            }
            if time.monotonic() > next_scan:
                seen_stopped.update(stopped_instances(groups, exits))
                next_scan = time.monotonic() + 1.0
                halted = stopped_bootstraps(groups, exits)
                now = time.monotonic()
                bootstrap_stopped = {i: bootstrap_stopped.get(i, now) for i in halted}
                overdue = [i for i, t in bootstrap_stopped.items() if now - t > leave_timeout]
                if overdue:
                    end_job_and_output()
                    _report(
                        f"the bootstrap of instance {overdue[0]} was stopped (SIGSTOP or a "
                        f"debugger) for over {leave_timeout:g} s (the collective timeout), so "
                        f"its program's output and end could not be relayed; ended the job"
                    )
                    return 1
            failures = sorted(
                (e for e in (*exits.values(), *leaving.values()) if e.code != 0),
                key=lambda e: (e.when_ns, e.instance),
            )
            lost, told = (
                ([], True)
                if failures
                else killed_first(
                    groups, list(vanished(groups, exits)), output.first_ended, GRACE_SECONDS
                )
            )
            if lost and proc.poll() is not None and (proc.returncode or 0) < 0:
                # mpiexec killed by a signal (before this pass or during it) is the cause of
                # what its process manager did after it, killing the bootstraps: the end of the
                # loop names it.
                lost = []
            if failures or lost:
                running = others_were_running(
                    failures[0] if failures else None, exits, len(instances), finished
                )
                stopped = sorted(seen_stopped.union(stopped_instances(groups, exits)))
                if end_on_hosts(exits):
                    return 1  # instances gone with their host: the others' failures follow
                tail = "; ended the other instances" if running else ""
                for i in stopped:
                    _report(f"instance {i} was stopped (SIGSTOP or a debugger) and never answered")
                if failures:
                    first = failures[0]
                    left = sorted(
                        (e for e in exits.values() if e.code == 0 and e.when_ns <= first.when_ns),
                        key=lambda e: (e.when_ns, e.instance),
                    )
                    if first.code == -signal.SIGTERM and left:
                        # Not ours: Open MPI's mpiexec ends a job one of whose processes
                        # returned before MPI_Init, with SIGTERM to the others.
                        _report(ended_by_mpiexec(left[0], failures))
                        return 1
                    left_first = peer_left(job_dir, first.instance)
                    if left_first is not None:
                        _report(returned_while_waited(*left_first, first.instance))
                        return 1
                    waiting = waiting_in_collectives(job_dir, instances)
                    came = {*exits, *leaving, *stopped, *waiting}
                    timed_out = first.instance in waiting  # it failed waiting for a peer
                    stuck = [i for i in instances if i not in came] if timed_out else []
                    if stuck:
                        _report(
                            f"instance(s) {', '.join(map(str, stuck))} never reached the "
                            f"collective that instance {first.instance} waited in: stuck in the "
                            f"program (a sleep, a loop, a hung data loader?)"
                        )
                    _report(first.describe() + tail)
                    if first.instance not in shown_alone:
                        _report_tail(job_dir, first.instance)
                    return first.launcher_code
                if told:
                    _report(f"instance {lost[0]} was killed before reporting its exit status{tail}")
                else:
                    _report(unordered_kills(lost) + tail)
                return 1
            now = time.monotonic()
            if (
                host_of
                and not finished
                and now - launched > leave_timeout
                and any(not os.path.exists(pid_path(job_dir, i)) for i in instances)
            ):
                end_on_hosts(exits, leave_timeout)
                return 1
            returned |= {i: now for i in exits if i not in returned}
            if (
                not finished
                and returned
                and len(exits) < len(instances)
                and now - min(returned.values()) > leave_timeout
            ):
                stopped = sorted(seen_stopped.union(stopped_instances(groups, exits)))
                end_job_and_output()
                for i in stopped:
                    _report(f"instance {i} was stopped (SIGSTOP or a debugger) and never answered")
                _report(left_early(exits, instances, returned, stopped))
                return 1
            if finished:
                still_running = [  # started (a pid file, on any host) and no exit status
                    i for i in instances if i not in exits and os.path.exists(pid_path(job_dir, i))
                ]
                if proc.returncode != 0 and still_running:
                    # mpiexec, or the process manager under it (hydra_pmi_proxy, Open MPI's
                    # prted), died while instances ran: their output pipes stay open, so
                    # end them now rather than drain until their programs finish.
                    end_on_hosts(exits)
                    output.show_hidden()
                    _report(
                        f"mpiexec {how_it_ended(proc.returncode)} while instance(s) "
                        f"{', '.join(map(str, still_running))} still ran (was its process manager, "
                        f"such as hydra_pmi_proxy, killed?); ended them"
                    )
                    return shell_code(proc.returncode) or 1
                output.drain()
                break
            time.sleep(POLL_SECONDS)
        missing = [i for i in instances if i not in exits]
        if proc.returncode != 0 or missing:
            end_on_hosts(exits)  # and the instances a dead mpiexec left behind
            output.show_hidden()
            _report(
                f"mpiexec {how_it_ended(proc.returncode)} and instances {missing} reported no exit "
                f"status; see the MPI messages above"
            )
            return shell_code(proc.returncode) or 1
        return 0
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP
        end_job_and_output()
        signum = interrupt_signal(stop)
        _report(
            "interrupted; ended all instances"
            if signum == signal.SIGINT
            else f"got signal {signum}; ended all instances"
        )
        return 128 + signum
    finally:
        if proc.poll() is None:
            end_job(proc, groups)
        groups.close()
        output.drain()
        remove_leftover_segments(started_ns)
