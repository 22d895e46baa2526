"""Alpha-beta cost of GCL collectives on the IPU-POD topology.

A collective runs as rings: inside an IPU-Link domain (a POD64 at most) over IPU-Links;
a group that spans Pods runs hierarchically, a reduce-scatter inside each domain, the
collective across Pods over GW-Links on the shards, and an all-gather inside each domain.

References:
    Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 69(2), 2009 (ring all-reduce: 2(p-1) steps of n/p bytes).
    Thakur, Rabenseifner and Gropp, "Optimization of collective communication operations
    in MPICH", IJHPCA 19(1), 2005 (alpha-beta costs of ring reduce-scatter, all-gather and
    scatter + all-gather broadcast). graphcore/poplibs popops/Collectives.hpp (what each
    GCL method does). GCL User Guide (groups; GW-Links as the second tier).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from hardware._layout import ReplicaLayout
from hardware._parameters import ModelParameters
from hardware._specs import SystemSpec
from hardware._step_profile import METHODS, CollectiveRecord, resolve_group


def ring_seconds(
    kind: str, method: str, p: int, nbytes: float, bandwidth: float, latency: float
) -> float:
    """Seconds of one collective on a ring of ``p`` IPUs, in alpha-beta form.

    With alpha = ``latency`` per step, beta = 1 / ``bandwidth`` per byte and direction,
    n = ``nbytes`` per IPU:

    - clockwise / anticlockwise ring, all-reduce: ``2(p-1) alpha + 2(p-1)/p n beta``
      (reduce-scatter then all-gather, p fragments); reduce-scatter or all-gather alone is
      half of it: ``(p-1) alpha + (p-1)/p n beta``.
    - bidirectional ring pair: the same steps, but each direction carries half the data:
      ``2(p-1) alpha + 2(p-1)/p (n/2) beta``.
    - meet-in-the-middle ring: fragments travel half-way in each direction, so each phase
      takes ``ceil((p-1)/2)`` steps of one n/p fragment per direction:
      ``2 ceil((p-1)/2) (alpha + n/p beta)`` (the last step of an even ring uses one
      direction only, which the ceiling accounts for).
    - broadcast: scatter then all-gather along the ring (van de Geijn), the all-reduce cost.

    ``auto`` is refused: gcl settles it by its own rule before a collective runs
    (``gcl.collective_method``), and the model prices the method that runs.

    References:
        Patarasuk and Yuan 2009; Thakur et al. 2005; poplibs popops/Collectives.hpp.
    """
    if p < 1 or nbytes < 0 or bandwidth <= 0 or latency < 0:
        raise ValueError(
            f"ring_seconds needs p >= 1, nbytes >= 0, bandwidth > 0 and latency >= 0; got "
            f"p={p}, nbytes={nbytes}, bandwidth={bandwidth}, latency={latency}."
        )
    if p == 1:
        return 0.0
    phases = 2 if kind in ("all_reduce", "broadcast") else 1
    beta = 1.0 / bandwidth
    if method in ("clockwise_ring", "anticlockwise_ring"):
        return phases * ((p - 1) * latency + (p - 1) / p * nbytes * beta)
    if method == "bidirectional_ring_pair":
        return phases * ((p - 1) * latency + (p - 1) / p * (nbytes / 2) * beta)
    if method == "meet_in_middle_ring":
        return phases * math.ceil((p - 1) / 2) * (latency + nbytes / p * beta)
    raise ValueError(f"`method` {method!r} is not a GCL method: use one of {METHODS}.")


class CollectiveTime(NamedTuple):
    """Seconds of one collective, split by link tier.

    Attributes:
        ipu_links: seconds on IPU-Links inside the IPU-Link domains.
        gw_links: seconds on GW-Links between Pods.
    """

    ipu_links: float
    gw_links: float

    @property
    def total(self) -> float:
        """The tiers run one after the other."""
        return self.ipu_links + self.gw_links


class GroupSpan(NamedTuple):
    """How one replica group lies on the topology.

    Attributes:
        per_domain: group members inside one IPU-Link domain (the inner ring size).
        domains: IPU-Link domains the group spans (the outer ring size).
    """

    per_domain: int
    domains: int


def group_span(group: object, layout: ReplicaLayout, system: SystemSpec) -> GroupSpan:
    """The inner and outer ring sizes of ``group``'s collectives under ``layout``."""
    resolved = resolve_group(group, layout.num_replicas)
    replicas_per_domain = max(system.link_domain_ipus // layout.ipus_per_replica, 1)
    # Members are stride apart; a domain holds replicas_per_domain consecutive replicas.
    per_domain = max(min(resolved.size, replicas_per_domain // resolved.stride), 1)
    return GroupSpan(per_domain, resolved.size // per_domain)


def link_bandwidths(system: SystemSpec) -> tuple[float, float]:
    """Bytes/s per IPU and direction on IPU-Links and on GW-Links.

    A ring hop uses one IPU-Link; a machine's GW-Links are shared by its IPUs, since every
    group runs its collective at the same time.
    """
    machine = system.machine
    return (
        machine.ipu.ipu_link_bandwidth,
        machine.gw_links * machine.gw_link_bandwidth / machine.ipus,
    )


def collective_time(
    record: CollectiveRecord,
    layout: ReplicaLayout,
    system: SystemSpec,
    params: ModelParameters,
) -> CollectiveTime:
    """Seconds of ``record`` on ``system``, hierarchical when its group spans Pods.

    A replica of k IPUs spreads its tensor over its IPUs, which run k rings in parallel on
    n/k bytes each. With m members per domain and P domains:

    - all-reduce: ``RS_ipu(m, n) + AR_gw(P, n/m) + AG_ipu(m, n)``
    - reduce-scatter: ``RS_ipu(m, n) + RS_gw(P, n/m)``
    - all-gather: ``AG_gw(P, n/m) + AG_ipu(m, n)``
    - broadcast: ``BC_gw(P, n) + BC_ipu(m, n)``

    each term a ``ring_seconds`` of the record's method.

    References:
        Thakur et al. 2005 (hierarchical composition of ring collectives); GCL User Guide
        (IPU-Links, then GW-Links as the second tier).
    """
    span = group_span(record.group, layout, system)
    n = record.bytes / layout.ipus_per_replica
    b_ipu, b_gw = link_bandwidths(system)
    a_ipu, a_gw = params.ipu_link_latency, params.gw_link_latency
    m, p = span.per_domain, span.domains
    method = record.method

    def inner(kind: str, size: float) -> float:
        return ring_seconds(kind, method, m, size, b_ipu, a_ipu)

    def outer(kind: str, size: float) -> float:
        return ring_seconds(kind, method, p, size, b_gw, a_gw)

    if p == 1:
        return CollectiveTime(inner(record.kind, n), 0.0)
    if record.kind == "all_reduce":
        return CollectiveTime(
            inner("reduce_scatter", n) + inner("all_gather", n), outer("all_reduce", n / m)
        )
    if record.kind == "reduce_scatter":
        return CollectiveTime(inner("reduce_scatter", n), outer("reduce_scatter", n / m))
    if record.kind == "all_gather":
        return CollectiveTime(inner("all_gather", n), outer("all_gather", n / m))
    return CollectiveTime(inner("broadcast", n), outer("broadcast", n))
