"""Instances on real hosts: which have started, which still live, which hosts still answer.

The launcher cannot see another host's processes. What it has is the job directory in the
working directory, which ``--real-hosts`` needs shared with the hosts (as the program's path
is): a bootstrap's pid file appears when it starts, and its modification time is renewed every
``HEARTBEAT_SECONDS`` while the program runs. An instance that has neither reported an exit
status nor renewed its pid file for ``STALE_SECONDS`` was killed, or its host went down.

A host answers when a TCP connection to its ssh port is accepted or refused within
``PROBE_SECONDS``: either way the machine is there. No answer (a timeout, no route) means its
network link or the machine is down. The port is ssh's (22), which MPI's launchers use to reach
the hosts; a host whose firewall drops it silently is reported as not answering only when the
job has already failed.

References:
    OpenSSH ``ssh(1)`` and ``sshd_config(5)`` (port 22 by default); MPICH Hydra and Open MPI
    reach the hosts through ssh (``mpiexec -launcher ssh``, ``plm_rsh_agent``).
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from launch._job import HEARTBEAT_SECONDS, pid_path

SSH_PORT = 22
PROBE_SECONDS = 2.0
STALE_SECONDS = 10 * HEARTBEAT_SECONDS


def heartbeat_ns(job_dir: str, instance: int) -> int | None:
    """When ``instance``'s bootstrap last renewed its pid file; None before it started."""
    try:
        return os.stat(pid_path(job_dir, instance)).st_mtime_ns
    except OSError:
        return None


def stale(job_dir: str, instance: int, now_ns: int | None = None) -> bool:
    """Whether ``instance`` started but has not renewed its pid file for ``STALE_SECONDS``."""
    seen = heartbeat_ns(job_dir, instance)
    now_ns = time.time_ns() if now_ns is None else now_ns
    return seen is not None and now_ns - seen > STALE_SECONDS * 1e9


def settle(
    job_dir: str,
    instances: Collection[int],
    reported: Callable[[], Collection[int]],
    timeout: float = STALE_SECONDS,
) -> list[int]:
    """Of ``instances`` (started, no exit status yet), those that are gone.

    Waits until each has reported an exit status or renewed its pid file since the call, at
    most ``timeout`` seconds: a live bootstrap renews it within ``HEARTBEAT_SECONDS``, so
    only the dead ones cost the whole wait.
    """
    base = {i: heartbeat_ns(job_dir, i) for i in instances}
    pending = set(instances)
    deadline = time.monotonic() + timeout
    while pending:
        done = set(reported())
        pending = {i for i in pending if i not in done and heartbeat_ns(job_dir, i) == base[i]}
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return sorted(pending)


def probe(host: str, port: int = SSH_PORT, timeout: float = PROBE_SECONDS) -> str:
    """Why ``host`` does not answer on the network; empty when it does."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return ""
    except ConnectionRefusedError:
        return ""  # refused by the machine itself: it is there
    except socket.gaierror:
        return "its name does not resolve"
    except TimeoutError:
        return f"no reply on port {port} within {timeout:g} s"
    except OSError as error:  # no route to host, network unreachable, ...
        return f"{(error.strerror or str(error)).lower()} (port {port})"


def silent_hosts(hosts: Collection[str], timeout: float = PROBE_SECONDS) -> dict[str, str]:
    """The hosts that do not answer, each with why; probed at once, so it takes at most
    ``timeout`` seconds."""
    unique = sorted(set(hosts))
    if not unique:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(unique))) as pool:
        reasons = {h: pool.submit(probe, h, timeout=timeout) for h in unique}
    return {h: r for h, f in reasons.items() if (r := f.result())}


def _instances(numbers: Sequence[int]) -> str:
    return f"instance{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}"


def _down(why: str) -> str:
    return f"({why}): its network link or the machine is down"


def by_host(host_of: Sequence[str], instances: Collection[int]) -> dict[str, list[int]]:
    """``instances`` grouped by their host, hosts in instance order."""
    grouped: dict[str, list[int]] = {}
    for i in sorted(instances):
        grouped.setdefault(host_of[i], []).append(i)
    return grouped


def host_lines(
    host_of: Sequence[str],
    *,
    silent: Mapping[str, str],
    lost: Collection[int] = (),
    not_started: Collection[int] = (),
    start_timeout: float = 0.0,
) -> list[str]:
    """What to say about the hosts: one line per host that does not answer, whose instances
    never started, or whose instances ended without an exit status; a host each line once."""
    lines = []
    named = set()
    all_on = by_host(host_of, range(len(host_of)))
    for host, numbers in by_host(host_of, not_started).items():
        why = (
            f"it does not answer {_down(silent[host])}"
            if host in silent
            else "it answers on the network: check that ssh reaches it without a prompt and "
            "that the MPI is installed there (-v shows the MPI's messages)"
        )
        within = (
            f" within {start_timeout:g} s (--collective-timeout bounds the start too)"
            if start_timeout
            else ""
        )
        lines.append(f"host {host} did not start {_instances(numbers)}{within}: {why}")
        named.add(host)
    for host, numbers in by_host(host_of, lost).items():
        if host in named or host in silent:  # a host that does not answer: all it ran, below
            continue
        whole = " (all it ran)" if numbers == all_on[host] and len(numbers) > 1 else ""
        why = (
            f"{'their processes were' if len(numbers) > 1 else 'its process was'} killed, "
            "or the host went down"
        )
        lines.append(
            f"host {host}: {_instances(numbers)}{whole} ended without an exit status: {why}"
        )
        named.add(host)
    for host, why in silent.items():
        if host not in named and host in all_on:
            lines.append(f"host {host} ({_instances(all_on[host])}) stopped answering {_down(why)}")
    return lines


def _ssh_lost(text: str, host: str) -> bool:
    """Whether ssh said its connection to ``host`` closed or could not be made (OpenSSH's
    "Connection to HOST closed by remote host." and "ssh: connect to host HOST port N: ...")."""
    return f"Connection to {host} closed" in text or f"connect to host {host} port" in text


def explain(
    job_dir: str,
    host_of: Sequence[str],
    waiting: Collection[int],
    reported: Callable[[], Collection[int]],
    end: Callable[[], None],
    start_timeout: float = 0.0,
    mpi_errors: Callable[[], str] = str,
) -> tuple[list[str], list[int]]:
    """After a failure on real hosts: ends the job, and returns what to say about the hosts
    and which instances are gone (the cause, where there are any: the others' failures
    follow from them).

    The hosts are probed while the instances settle and the job ends, so the probe's bound
    adds nothing to the time the job takes to end.

    Args:
        job_dir: the job directory.
        host_of: the host of each instance.
        waiting: the instances without an exit status.
        reported: the instances with an exit status now (read again while settling).
        end: ends the job (once the instances have settled: ending it kills them).
        start_timeout: the start-up bound to name for instances that never started; 0 when
            the job ended some other way before they did.
        mpi_errors: the last of mpiexec's stderr, where its ssh reports a lost connection.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        probing = pool.submit(silent_hosts, host_of)
        not_started = [i for i in waiting if heartbeat_ns(job_dir, i) is None]
        lost = settle(job_dir, [i for i in waiting if i not in not_started], reported)
        end()
        silent = probing.result()
    # The MPI ends every host's processes once one host is lost, as fast as the heartbeat
    # can tell; its ssh names the host whose connection went first.
    lost_on = by_host(host_of, lost)
    text = mpi_errors()
    first = {h for h in lost_on if _ssh_lost(text, h)} if len(lost_on) > 1 else set()
    if first:
        lost = [i for i in lost if host_of[i] in first]
    lines = host_lines(
        host_of, silent=silent, lost=lost, not_started=not_started, start_timeout=start_timeout
    )
    return lines, lost
