"""Host-to-IPU transfer time over an IPU-Machine's host links.

References:
    IPU-POD DA build and test guide (pod_da_kit.html): each IPU-M2000 has two 100 GbE
    RoCEv2 NICs to the host, shared by its four IPUs. Memory and Performance Optimisation
    guide, section 7.5 (host I/O as a scaling limit).
"""

from __future__ import annotations

from hardware._specs import SystemSpec


def replicas_per_machine(system: SystemSpec, num_replicas: int, ipus_per_replica: int) -> int:
    """Replicas whose host traffic shares one machine's host links."""
    ipus_used = min(system.machine.ipus, num_replicas * ipus_per_replica)
    return max(ipus_used // ipus_per_replica, 1)


def host_io_seconds(
    bytes_per_replica: float, system: SystemSpec, num_replicas: int, ipus_per_replica: int
) -> float:
    """Seconds to stream one micro-batch to every replica of a machine.

    ``t = n_r * b / (L * B_link)``: the machine's ``n_r`` replicas each receive ``b`` bytes
    over its ``L`` host links of ``B_link`` bytes/s, all at once. Host-side limits (data
    loading, PCIe, the NIC's latency) are not modelled.

    References:
        pod_da_kit.html (2 x 100 GbE per machine).
    """
    if bytes_per_replica < 0:
        raise ValueError(f"`bytes_per_replica` must be >= 0, got {bytes_per_replica}.")
    machine = system.machine
    n_r = replicas_per_machine(system, num_replicas, ipus_per_replica)
    return n_r * bytes_per_replica / (machine.host_links * machine.host_link_bandwidth)
