"""``--real-hosts``: instances on the hosts ``-H`` names, through MPI's ssh launcher, for real.

Two loopback addresses (127.0.0.1 and 127.0.0.2) served by an sshd this fixture starts (its
own port, host key and authorized key; Debian's openssh-server, installed with apt-get where
it is missing and the tests run as root) are two hosts to MPI, whichever MPI is in use
(Hydra's ``-launcher-exec`` or Open MPI's ``plm_rsh_agent`` names the ssh wrapper). Nothing of
the remote side is mocked: the MPI's daemon (Hydra's ``hydra_pmi_proxy``, Open MPI's
``prted``) reaches 127.0.0.2 through ssh and that sshd, and the instances it starts report an
sshd among their ancestors.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest
from deadlines import within
from repo_scripts import load_benchmark

from launch._mpi import find_mpiexec, mpi_flavour

ssh_daemons = load_benchmark("ssh_daemons")

HOSTS = "127.0.0.1,127.0.0.2"

PROBE = textwrap.dedent(
    """
    import json, os, sys
    import popdist
    from mpi4py import MPI
    chain, pid = [], os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/comm") as f:
            chain.append(f.read().strip())
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    i = popdist.getInstanceIndex()
    view = {
        "instance": i,
        "local": popdist.getLocalInstanceIndex(),
        "via_sshd": "sshd" in chain,
        "summed": MPI.COMM_WORLD.allreduce(i),
        "cpus": sorted(os.sched_getaffinity(0)),
        "marker": os.environ.get("FROM_LAUNCHER"),
    }
    with open(os.path.join(sys.argv[1], f"view-{i}.json"), "w") as f:
        json.dump(view, f)
    print("hello")
    if len(sys.argv) > 2 and i == int(sys.argv[2]):
        sys.exit(3)
    """
)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ssh_launcher(tmp_path_factory):
    """An sshd on 127.0.0.1 and 127.0.0.2; yields an ssh wrapper script that reaches it."""
    sshd = ssh_daemons.install("sshd", "openssh-server")
    if sshd is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("no sshd/ssh here and openssh-server could not be installed (needs root)")
    d = tmp_path_factory.mktemp("sshd")
    ssh_daemons.keys(d)
    port = _free_port()
    config = ssh_daemons.config(d, "loopback", port, ["127.0.0.1", "127.0.0.2"])
    log = open(d / "sshd.log", "wb")  # noqa: SIM115 - closed at teardown
    daemon = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stderr=log)
    wrapper = ssh_daemons.wrapper(d, port)
    try:
        try:
            ssh_daemons.wait_until_reachable(wrapper, "127.0.0.2", daemon, d / "sshd.log")
        except RuntimeError as why:
            pytest.skip(str(why))
        yield wrapper
    finally:
        ssh_daemons.stop(daemon)
        log.close()


def _run(tmp_path, wrapper, *extra):
    program = tmp_path / "probe.py"
    program.write_text(PROBE)
    out = tmp_path / "views"
    out.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "launch", "--real-hosts", "-H", HOSTS]
    command += ["--num-replicas=8", "--num-instances=4", "--print-topology"]
    if mpi_flavour(find_mpiexec()) == "openmpi":
        # Open MPI's ssh launcher. Both "hosts" are this machine under one hostname, and Open
        # MPI 5 names a shared-memory (btl/sm) segment by hostname, job and local rank, so
        # instance 0 and instance 2 (local rank 0 on each host) would share one segment: about
        # one run in ten crashed in mca_btl_sm_poll_handle_frag. Real hosts have their own
        # names and memory; here the instances talk over TCP only (30 runs in a row passed).
        ssh = f"--mca plm_rsh_agent {wrapper} --mca btl self,tcp"
    else:
        ssh = f"-launcher ssh -launcher-exec {wrapper}"  # Hydra's
    command += [f"--mpi-global-args={ssh}", str(program), str(out)]
    result = subprocess.run(
        [*command, *extra],
        capture_output=True,
        text=True,
        timeout=within(100),
        cwd=tmp_path,
        env={**os.environ, "FROM_LAUNCHER": "yes"},
    )
    views = {v["instance"]: v for v in (json.loads(p.read_text()) for p in out.iterdir())}
    return result, views


@pytest.mark.timeout(180)
def test_two_loopback_hosts_over_ssh(tmp_path, ssh_launcher):
    result, views = _run(tmp_path, ssh_launcher)
    assert result.returncode == 0, result.stderr
    assert sorted(views) == [0, 1, 2, 3]
    # PopRun's placement: instances 0-1 on the first host, 2-3 on the second.
    assert [views[i]["local"] for i in range(4)] == [0, 1, 0, 1]
    assert views[2]["via_sshd"] and views[3]["via_sshd"]
    assert {v["summed"] for v in views.values()} == {0 + 1 + 2 + 3}  # MPI across the hosts
    assert {v["marker"] for v in views.values()} == {"yes"}  # the launcher's environment
    assert all(len(v["cpus"]) == 1 for v in views.values())  # pinned, as local instances
    assert "real hosts, reached through MPI" in result.stdout
    tagged = sorted(line for line in result.stdout.splitlines() if line.endswith(">:hello"))
    assert tagged == [f"[1,{i}]<stdout>:hello" for i in range(4)]


@pytest.mark.timeout(180)
def test_a_failing_remote_instance_ends_the_job(tmp_path, ssh_launcher):
    result, _ = _run(tmp_path, ssh_launcher, "3")
    assert result.returncode == 3
    assert "instance 3 exited with code 3" in result.stderr
