"""Real hosts that vanish: a job across network namespaces, and the faults real clusters have.

The fixture makes two hosts out of Linux network namespaces (``benchmarks/namespace_hosts.py``,
which ``benchmarks/host_faults.py`` times: ``ip netns``, Debian's iproute2), each joined to a
bridge on this machine by a veth pair, with its own address, its own host name (a UTS
namespace, so the MPI does not take the two for one machine) and its own sshd.
The launcher runs outside them, as on a login node, and reaches them through ssh with
``--real-hosts --host-subnet``. The faults are made for real: a host's link taken down in
the middle of a run and before it starts, every process of a host killed, a host whose sshd
never answers. Each job must end by itself, within the collective timeout plus the launcher's
bounded look (a 2 s probe, a 5 s heartbeat), naming the host and its instances, and leave
nothing running in any namespace.

The namespaces share this machine's kernel, so MPICH's UCX is told to use TCP between
instances (``UCX_TLS=tcp,self``): its shared-memory transports would otherwise join two
"hosts" as one machine does, and a link taken down would cut nothing.

Needs root (namespaces); skipped where they cannot be made.
"""

import os
import signal
import subprocess
import time

import pytest
from deadlines import within
from repo_scripts import load_benchmark

namespace_hosts = load_benchmark("namespace_hosts")

TIMEOUT = 5  # --collective-timeout of every job here
SLACK = 6  # seconds for the launcher's probe and the machine's load


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    try:
        with namespace_hosts.two_hosts(tmp_path_factory.mktemp("hosts")) as made:
            yield made
    except namespace_hosts.UnavailableError as why:
        pytest.skip(str(why))


def _start(tmp_path, hosts, steps=2000):
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    return namespace_hosts.start_job(hosts, str(marks), steps, TIMEOUT, subprocess.PIPE), marks


def _running(job, marks, count=4, timeout=60):
    """Waits until every instance has done a few collectives."""
    deadline = time.monotonic() + within(timeout)
    while len(list(marks.glob("running-*"))) < count:
        assert job.poll() is None, job.communicate()
        assert time.monotonic() < deadline, "the job did not get going"
        time.sleep(0.1)


def _end(job, bound):
    """The job's (returncode, stderr, seconds taken), the job ending by itself in ``bound``."""
    began = time.monotonic()
    out, err = job.communicate(timeout=within(bound + 30))
    return job.returncode, err, time.monotonic() - began, out


def _nothing_left(hosts, timeout=15):
    deadline = time.monotonic() + within(timeout)
    while any(hosts.left_running(h) for h in range(2)):
        if time.monotonic() > deadline:
            raise AssertionError(f"left running: {[hosts.left_running(h) for h in range(2)]}")
        time.sleep(0.2)


@pytest.mark.timeout(180)
def test_a_job_across_two_namespace_hosts(tmp_path, hosts):
    job, _ = _start(tmp_path, hosts, steps=20)
    code, err, _, out = _end(job, 60)
    assert code == 0, err
    lines = sorted(line.split(">:", 1)[1] for line in out.splitlines() if "total" in line)
    names = [f"host {hosts.namespace[0]}"] * 2 + [f"host {hosts.namespace[1]}"] * 2
    assert lines == sorted(f"total 10.0 {n}" for n in names)  # 1+2+3+4 across the hosts
    _nothing_left(hosts)


@pytest.mark.timeout(180)
def test_a_host_whose_link_goes_down_is_named(tmp_path, hosts):
    job, marks = _start(tmp_path, hosts)
    try:
        _running(job, marks)
        namespace_hosts.ip("link", "set", hosts.link[1], "down")
        code, err, took, _ = _end(job, TIMEOUT + SLACK)
    finally:
        namespace_hosts.ip("link", "set", hosts.link[1], "up")
    assert code == 1, err
    assert f"host {hosts.address[1]} (instances 2, 3) stopped answering" in err, err
    assert took < within(TIMEOUT + SLACK), err
    _nothing_left(hosts)


@pytest.mark.timeout(180)
def test_a_host_whose_processes_are_all_killed_is_named(tmp_path, hosts):
    job, marks = _start(tmp_path, hosts)
    _running(job, marks)
    hosts.kill_all(1)
    code, err, took, _ = _end(job, TIMEOUT + SLACK)
    assert code != 0, err
    line = f"host {hosts.address[1]}: instances 2, 3 (all it ran) ended without an exit status"
    assert line in err, err
    # The MPI ends the other host's instances too, within the same heartbeat; where its ssh
    # said which connection closed first (not every run: it may be killed before it does),
    # only that host is named.
    if f"Connection to {hosts.address[1]} closed" in err:
        assert f"host {hosts.address[0]}:" not in err, err
    assert took < within(TIMEOUT + SLACK), err
    _nothing_left(hosts)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["link down", "sshd stopped"])
def test_a_host_that_never_answers_at_start_is_named(tmp_path, hosts, how):
    listener = hosts.daemons[1].pid
    if how == "link down":
        namespace_hosts.ip("link", "set", hosts.link[1], "down")
    else:
        os.kill(listener, signal.SIGSTOP)
    try:
        job, _ = _start(tmp_path, hosts)
        code, err, took, _ = _end(job, TIMEOUT + SLACK)
    finally:
        namespace_hosts.ip("link", "set", hosts.link[1], "up")
        os.kill(listener, signal.SIGCONT)
    assert code == 1, err
    assert f"host {hosts.address[1]} did not start instances 2, 3 within {TIMEOUT} s" in err
    answer = "it does not answer" if how == "link down" else "it answers on the network"
    assert answer in err, err
    assert took < within(TIMEOUT + SLACK), err
    _nothing_left(hosts)
