"""The host's share of a step: preparing each instance's samples on the POD's host servers.

A small model driven from Python can be decided by its host: the IPU step takes a few
milliseconds while the data loader needs longer to prepare the next batch, and the IPUs wait
(Graphcore, Memory and Performance Optimisation guide, section 7.5, "Host-I/O"; PopVision
System Analyser shows exactly this). The emulator measures what the loader costs per sample
on the machine that ran the program (CPU seconds, so an oversubscribed machine does not
inflate it) and scales it to the POD: every instance prepares its own replicas' samples on its
host, its workers in parallel up to its share of the host's cores.

``t_host = c * s * n / min(w, C / i)``: ``c`` CPU seconds per sample measured here, ``s`` a
POD core's speed relative to this machine's, ``n`` the instance's samples per step, ``w`` the
loader's workers (at least 1), ``C`` cores per host and ``i`` instances per host.

References:
    Graphcore, "Memory and Performance Optimisation on the IPU", section 7.5 (host I/O as a
    scaling limit; more hosts when the application is I/O bound). MLPerf Training v1.1,
    Graphcore system descriptions (2 x AMD EPYC 7742 per host) and launch lines (one host
    per 16 IPUs).
"""

from __future__ import annotations

import math

from hardware._layout import ReplicaLayout
from hardware._parameters import HOST_CORES, HOST_SPEED_FACTOR, IPUS_PER_HOST
from hardware._step_profile import StepProfile


def host_servers(layout: ReplicaLayout) -> int:
    """Host servers of the job: the hosts it names (``--host``), or one per 16 IPUs as in
    Graphcore's MLPerf systems, and never more than its instances."""
    named = len(set(layout.hosts))
    return max(min(max(named, math.ceil(layout.num_ipus / IPUS_PER_HOST)), layout.num_instances), 1)


def cores_per_instance(layout: ReplicaLayout) -> float:
    """A host's cores shared by the instances it runs."""
    per_host = math.ceil(layout.num_instances / host_servers(layout))
    return HOST_CORES / per_host


def host_compute_seconds(profile: StepProfile, layout: ReplicaLayout) -> float:
    """Seconds an instance's host spends preparing one step's samples on the POD (0 when the
    program's loader was not measured)."""
    if profile.host_cpu_seconds_per_sample <= 0:
        return 0.0
    samples = layout.num_local_replicas * profile.samples_per_update * profile.device_iterations
    parallel = min(max(profile.host_workers, 1), cores_per_instance(layout))
    return profile.host_cpu_seconds_per_sample * HOST_SPEED_FACTOR * samples / parallel
