"""Real ssh daemons for multi-host jobs on one machine: Debian's openssh-server with keys of
their own (``namespace_hosts.py``, ``host_faults.py``, and the launcher's tests).

Each daemon gets its own host key, authorized key and config; MPI reaches it through an ssh
wrapper script that names the client key (MPICH Hydra's ``-launcher-exec``, Open MPI's
``plm_rsh_agent``).
"""

import os
import shutil
import subprocess
import time
from pathlib import Path


def install(binary: str, package: str) -> str | None:
    """``binary``'s path, installing Debian's ``package`` with apt-get where it is missing and
    the tests run as root; None if it cannot be had."""
    found = shutil.which(binary) or next(
        (p for p in (f"/usr/sbin/{binary}", f"/sbin/{binary}") if os.path.exists(p)), None
    )
    if found or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return found
    for update in (False, True):
        if update:
            subprocess.run(["apt-get", "update"], capture_output=True, timeout=300, check=False)
        subprocess.run(
            ["apt-get", "install", "-y", package], capture_output=True, timeout=300, check=False
        )
        found = shutil.which(binary) or (
            f"/usr/sbin/{binary}" if os.path.exists(f"/usr/sbin/{binary}") else None
        )
        if found:
            return found
    return None


def keys(directory: Path) -> None:
    """A host key and a client key in ``directory``; the client's is the one authorized."""
    for name in ("host_key", "client_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(directory / name)],
            check=True,
        )
    shutil.copy(directory / "client_key.pub", directory / "authorized_keys")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory


def config(directory: Path, name: str, port: int, addresses: list[str]) -> Path:
    """An sshd config for ``addresses``; a client that stops answering is dropped in 3 s."""
    path = directory / f"sshd_{name}.conf"
    listen = "".join(f"ListenAddress {a}\n" for a in addresses)
    path.write_text(
        f"Port {port}\n{listen}HostKey {directory / 'host_key'}\n"
        f"AuthorizedKeysFile {directory / 'authorized_keys'}\n"
        f"PidFile {directory / f'sshd_{name}.pid'}\nStrictModes no\nUsePAM no\n"
        "PermitRootLogin yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "ClientAliveInterval 1\nClientAliveCountMax 3\n"
    )
    return path


def wrapper(directory: Path, port: int) -> str:
    """An ssh command that reaches the daemons of ``directory``'s keys without a prompt."""
    path = directory / "ssh"
    path.write_text(
        f"#!/bin/sh\nexec ssh -F /dev/null -p {port} -i {directory / 'client_key'} "
        "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes "
        '-o LogLevel=ERROR -o ConnectTimeout=10 "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


def wait_until_reachable(ssh: str, host: str, daemon: subprocess.Popen, log: Path) -> None:
    """Returns once ``ssh host true`` works.

    Raises:
        RuntimeError: the daemon cannot serve here (its log's end in the message).
    """
    deadline = time.monotonic() + 15
    while True:
        probe = subprocess.run([ssh, host, "true"], capture_output=True, timeout=20, check=False)
        if probe.returncode == 0:
            return
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"sshd could not be run here: {log.read_text()[-500:]}")
        time.sleep(0.2)


def stop(daemon: subprocess.Popen) -> None:
    """Ends ``daemon``: SIGTERM, then SIGKILL after 10 s."""
    daemon.terminate()
    try:
        daemon.wait(timeout=10)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait(timeout=10)
