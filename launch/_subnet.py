"""``--host-subnet`` with ``--real-hosts``: the network the MPI's daemons and traffic use.

A launching machine often has several networks (loopback, a management network, the hosts'
data network), and MPI's default choice may be one the hosts cannot reach: the hosts' daemons
then cannot call back (Hydra's "unable to connect to server ... check for firewalls!").
PopRun has a host-subnet setting (its log says "No hosts specified; ignoring host-subnet
setting"), and Graphcore's published ``poprun`` lines also give Open MPI the subnet by hand.
Here the setting does what those lines do: Open MPI gets ``oob_tcp_if_include`` and
``btl_tcp_if_include``; Hydra names an interface instead (``-iface``), so the launcher finds
the one of its own that is in the subnet.

References:
    Graphcore's MLPerf v1.1 BERT-Large ``poprun`` line (mlcommons/training_results_v1.1:
    ``--mca oob_tcp_if_include 10.10.0.0/16 --mca btl_tcp_if_include 10.10.0.0/16``); MPICH
    Hydra ``mpiexec -help`` (``-iface``);
    Linux ``netdevice(7)`` (``SIOCGIFADDR``).
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct

from launch._errors import UsageError

_SIOCGIFADDR = 0x8915  # Linux netdevice(7): an interface's IPv4 address


def _ipv4_address(name: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address of interface ``name``; None if it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            reply = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return ipaddress.IPv4Address(reply[20:24])


def _network(subnet: str) -> ipaddress.IPv4Network:
    try:
        network = ipaddress.ip_network(subnet, strict=False)
    except ValueError:
        network = None
    if not isinstance(network, ipaddress.IPv4Network):
        raise UsageError(
            f"--host-subnet {subnet!r} is not an IPv4 subnet: give one as ADDRESS/BITS, "
            f"e.g. --host-subnet 10.10.0.0/16."
        )
    return network


def local_interface(subnet: str) -> str:
    """The name of this machine's interface with an address in ``subnet``.

    Raises:
        UsageError: ``subnet`` is not an IPv4 subnet, or no interface here is in it.
    """
    network = _network(subnet)
    seen = []
    for _, name in socket.if_nameindex():
        address = _ipv4_address(name)
        if address is None:
            continue
        if address in network:
            return name
        seen.append(f"{name} {address}")
    raise UsageError(
        f"--host-subnet {subnet}: no network interface of this machine is in it (here: "
        f"{', '.join(seen) or 'none with an IPv4 address'}): give the subnet this machine "
        f"shares with the hosts."
    )


def host_subnet_arguments(flavour: str, subnet: str) -> list[str]:
    """mpiexec words that keep the MPI's daemons and traffic on ``subnet``."""
    if flavour == "openmpi":
        cidr = str(_network(subnet))
        return ["--mca", "oob_tcp_if_include", cidr, "--mca", "btl_tcp_if_include", cidr]
    return ["-iface", local_interface(subnet)]
