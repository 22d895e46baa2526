"""Hosts made of Linux network namespaces, for ``host_faults.py`` and the launcher's tests.

Two namespaces (``ip netns``, Debian's iproute2) joined to a bridge on this machine by veth
pairs, each with its own address, its own host name (a UTS namespace, so the MPI does not take
the two for one machine) and its own sshd; this machine is the login node outside them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import ssh_daemons  # this folder's

from contract import ENV_MPIEXEC

# The program the jobs run (run, never imported): the launcher's tests' host program.
PROGRAM = str(Path(__file__).resolve().parents[1] / "tests" / "launch" / "host_program.py")


class UnavailableError(Exception):
    """Namespaces, iproute2 or sshd cannot be had here."""


def ip(*words: str, check: bool = True) -> subprocess.CompletedProcess:
    """``ip WORDS`` (iproute2), its output captured."""
    return subprocess.run(["ip", *words], capture_output=True, text=True, timeout=30, check=check)


class Hosts:
    """Two namespace hosts on a bridge; ``address[h]``, ``namespace[h]`` and ``link[h]`` (the
    veth end outside) for h in 0, 1."""

    def __init__(self, tag: str, octet: int, directory: Path, sshd: str) -> None:
        self.bridge = f"pdb{tag}"
        self.subnet = f"10.232.{octet}.0/24"
        self.namespace = [f"pde{tag}h{h}" for h in range(2)]
        self.link = [f"pdv{tag}h{h}" for h in range(2)]
        self.address = [f"10.232.{octet}.{h + 2}" for h in range(2)]
        self.daemons: list[subprocess.Popen] = []
        self.ssh = ""  # the ssh command that reaches them, once their daemons run
        self.directory, self.sshd = directory, sshd

    def make(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", self.subnet.replace(".0/", ".1/"), "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for ns, link, address in zip(self.namespace, self.link, self.address, strict=True):
            ip("netns", "add", ns)
            ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", link, "master", self.bridge, "up")
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "route", "add", "default", "via", self.subnet.replace(".0/24", ".1"))

    def start_daemons(self) -> str:
        ssh_daemons.keys(self.directory)
        ssh = ssh_daemons.wrapper(self.directory, 22)
        for ns, address in zip(self.namespace, self.address, strict=True):
            config = ssh_daemons.config(self.directory, ns, 22, [address])
            log = self.directory / f"{ns}.log"
            daemon = subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
                 f'hostname {ns}; exec {self.sshd} -D -e -f {config} 2>"{log}"'],
            )  # fmt: skip
            self.daemons.append(daemon)
            ssh_daemons.wait_until_reachable(ssh, address, daemon, log)
        return ssh

    def left_running(self, h: int) -> list[str]:
        """What runs in host ``h`` besides its sshd listener."""
        pids = ip("netns", "pids", self.namespace[h], check=False).stdout.split()
        left = []
        for pid in pids:
            if int(pid) == self.daemons[h].pid:
                continue
            try:
                left.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue
        return left

    def kill_all(self, h: int, sig: int = signal.SIGKILL, keep_listener: bool = True) -> None:
        for pid in ip("netns", "pids", self.namespace[h], check=False).stdout.split():
            if keep_listener and int(pid) == self.daemons[h].pid:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), sig)

    def remove(self) -> None:
        for h in range(len(self.namespace)):
            self.kill_all(h, signal.SIGCONT, keep_listener=False)
            self.kill_all(h, keep_listener=False)
        for daemon in self.daemons:
            daemon.wait(timeout=10)
        for ns in self.namespace:
            ip("netns", "del", ns, check=False)
        ip("link", "del", self.bridge, check=False)


@contextlib.contextmanager
def two_hosts(directory: Path) -> Iterator[Hosts]:
    """Two namespace hosts, each serving ssh; removed with everything in them at the end.

    Raises:
        UnavailableError: not root, no iproute2/unshare/sshd, or namespaces refused here.
    """
    if os.geteuid() != 0:
        raise UnavailableError("network namespaces need root")
    if ssh_daemons.install("ip", "iproute2") is None or shutil.which("unshare") is None:
        raise UnavailableError("no ip (iproute2) or unshare here")
    sshd = ssh_daemons.install("sshd", "openssh-server")
    if sshd is None:
        raise UnavailableError("no sshd here and openssh-server could not be installed")
    made = Hosts(str(os.getpid() % 100000), 1 + os.getpid() % 250, directory, sshd)
    try:
        try:
            made.make()
        except subprocess.CalledProcessError as error:
            why = error.stderr.strip()
            raise UnavailableError(f"namespaces cannot be made here: {why}") from None
        try:
            made.ssh = made.start_daemons()
        except RuntimeError as why:
            raise UnavailableError(str(why)) from None
        yield made
    finally:
        made.remove()


def start_job(
    hosts: Hosts, marks: str, steps: int, collective_timeout: float, stdout: int | None
) -> subprocess.Popen:
    """``poprun-emu --real-hosts`` of tests/launch/host_program.py across ``hosts``: 4
    instances, 2 on each; each leaves ``marks/running-<i>`` once it runs collectives.

    The namespaces share one kernel, so MPICH's UCX is told to use TCP (``UCX_TLS``): its
    shared-memory transports would join the two hosts, and a link taken down cut nothing.
    """
    if _open_mpi():
        ssh = f"--mca plm_rsh_agent {hosts.ssh}"  # Open MPI's ssh launcher
    else:
        ssh = f"-launcher ssh -launcher-exec {hosts.ssh}"  # Hydra's
    command = [
        sys.executable, "-m", "launch", "--real-hosts", "-H", ",".join(hosts.address),
        "--host-subnet", hosts.subnet, "--num-replicas=4", "--num-instances=4",
        f"--collective-timeout={collective_timeout:g}", f"--mpi-global-args={ssh}",
        PROGRAM, marks, str(steps),
    ]  # fmt: skip
    return subprocess.Popen(
        command,
        cwd=marks,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "UCX_TLS": "tcp,self"},
    )


def _open_mpi() -> bool:
    """Whether the launcher's MPI is Open MPI, whose ssh agent is an MCA parameter (Hydra's
    is a flag): the mpiexec poprun-emu picks (``POPDIST_EMU_MPIEXEC``, else the one beside
    this interpreter, else PATH's), told apart by ``mpiexec --version``."""
    named = os.environ.get(ENV_MPIEXEC, "")
    folders = (Path(sys.executable).parent, Path(sysconfig.get_path("scripts")))
    installed = [str(f / "mpiexec") for f in folders if (f / "mpiexec").is_file()]
    mpiexec = shutil.which(named) if named else (installed or [shutil.which("mpiexec")])[0]
    if mpiexec is None:
        return False
    out = subprocess.run(
        [mpiexec, "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    text = (out.stdout + out.stderr).lower()
    return any(name in text for name in ("open mpi", "openrte", "open-mpi"))
