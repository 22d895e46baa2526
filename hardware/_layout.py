"""The replica layout: how replicas, IPUs and host instances are arranged.

One small, pure value type: the launcher validates it, and the runtime and the hardware
model read it. How it crosses the process boundary (PopRun's ``POPDIST_*`` variables) is
the contract package's business (``contract``), not the hardware model's.

References:
    PopRun/PopDist User Guide, "Configuration" and "Python API": replicas are divided
    evenly among instances, instances evenly among hosts.
"""

from __future__ import annotations

import dataclasses

VALID_IPUS_PER_REPLICA = (1, 2, 4, 8, 16)


class LayoutError(ValueError):
    """A replica layout that PopRun would refuse; the message names the value and the fix."""


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclasses.dataclass(frozen=True)
class ReplicaLayout:
    """Replicas, IPUs and instances of one job, with PopRun's rules checked on creation.

    Replica ``r`` lives on instance ``r // num_local_replicas``; instances are spread over
    hosts in consecutive blocks of ``instances_per_host``, as PopRun divides them evenly.

    Attributes:
        num_replicas: total replicas (``--num-replicas``).
        num_instances: host processes (``--num-instances``).
        ipus_per_replica: IPUs per replica (``--ipus-per-replica``).
        hosts: host names (``-H/--host``), instances divided evenly among them.
    """

    num_replicas: int = 1
    num_instances: int = 1
    ipus_per_replica: int = 1
    hosts: tuple[str, ...] = ("localhost",)

    def __post_init__(self) -> None:
        r, n, ipr = self.num_replicas, self.num_instances, self.ipus_per_replica
        if not isinstance(self.hosts, tuple):
            object.__setattr__(self, "hosts", tuple(self.hosts))
        if r < 1:
            raise LayoutError(f"--num-replicas {r} must be at least 1.")
        if n < 1:
            raise LayoutError(f"--num-instances {n} must be at least 1.")
        if n > r:
            raise LayoutError(
                f"--num-instances {n} is more than --num-replicas {r}: every instance needs "
                f"at least one replica; use at most {r} instances."
            )
        if r % n:
            raise LayoutError(
                f"--num-replicas {r} is not divisible by --num-instances {n}: replicas are "
                f"divided evenly among instances; use a replica count that is a multiple of {n}."
            )
        if ipr not in VALID_IPUS_PER_REPLICA:
            raise LayoutError(
                f"--ipus-per-replica {ipr} is not supported: use one of "
                f"{', '.join(map(str, VALID_IPUS_PER_REPLICA))}."
            )
        if not _is_power_of_two(r * ipr):
            raise LayoutError(
                f"{r} replicas x {ipr} IPUs per replica = {r * ipr} IPUs, which is not a power "
                f"of two: GCL rings need a power-of-two IPU count; change --num-replicas."
            )
        if not self.hosts or any(not h for h in self.hosts):
            raise LayoutError(f"--host {','.join(self.hosts)!r} has an empty host name.")
        if n % len(self.hosts):
            raise LayoutError(
                f"--num-instances {n} cannot be divided evenly among {len(self.hosts)} hosts "
                f"({','.join(self.hosts)}): use a multiple of {len(self.hosts)} instances."
            )

    @property
    def num_local_replicas(self) -> int:
        """Replicas per instance."""
        return self.num_replicas // self.num_instances

    @property
    def num_ipus(self) -> int:
        """IPUs used by the whole job."""
        return self.num_replicas * self.ipus_per_replica

    @property
    def instances_per_host(self) -> int:
        """Instances started on each host."""
        return self.num_instances // len(self.hosts)

    def replica_offset(self, instance: int) -> int:
        """Global index of the first replica of ``instance``."""
        self._check_instance(instance)
        return instance * self.num_local_replicas

    def replicas_of_instance(self, instance: int) -> range:
        """Global indices of the replicas driven by ``instance``."""
        start = self.replica_offset(instance)
        return range(start, start + self.num_local_replicas)

    def instance_of_replica(self, replica: int) -> int:
        """The instance that drives global replica ``replica``."""
        if not 0 <= replica < self.num_replicas:
            raise LayoutError(f"replica {replica} is outside [0, {self.num_replicas}).")
        return replica // self.num_local_replicas

    def host_of_instance(self, instance: int) -> str:
        """The host an instance runs on."""
        self._check_instance(instance)
        return self.hosts[instance // self.instances_per_host]

    def local_instance_index(self, instance: int) -> int:
        """An instance's index among the instances of its host."""
        self._check_instance(instance)
        return instance % self.instances_per_host

    def _check_instance(self, instance: int) -> None:
        if not 0 <= instance < self.num_instances:
            raise LayoutError(f"instance {instance} is outside [0, {self.num_instances}).")
