"""What a simulated step is, for reports: its phases, trace tracks, intervals and result.

``hardware.simulate_step`` makes a :class:`StepSimulation`; the reports read it. Pure data.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

from hardware._layout import ReplicaLayout
from hardware._memory import MemoryBreakdown
from hardware._parameters import ModelParameters
from hardware._replica import ReplicaModel
from hardware._specs import SystemSpec
from hardware._step_profile import StepProfile

if TYPE_CHECKING:  # made by hardware._step, which imports this module
    from hardware._step import ReplicaReport

PHASES = (
    "host_compute",
    "host_io",
    "compute",
    "pipeline_bubble",
    "gradient_accumulation",
    "allreduce",
    "reduce_scatter",
    "all_gather",
    "broadcast",
    "weight_update",
    "streaming",
    "host_sync",
)
_PHASE_OF_KIND = {
    "all_reduce": "allreduce",
    "reduce_scatter": "reduce_scatter",
    "all_gather": "all_gather",
    "broadcast": "broadcast",
}


def ipu_track(ipu: int) -> str:
    """The trace track of one IPU of replica 0 (its compute, and a pipeline's stages)."""
    return f"IPU {ipu} (replica 0)"


TRACK_COMPUTE = ipu_track(0)
TRACK_HOST_LINK = "Host links (machine 0)"
TRACK_IPU_LINKS = "IPU-Links"
TRACK_GW_LINKS = "GW-Links"
TRACK_HOST_SYNC = "Host sync"
TRACK_HOST = "Host CPU (instance 0)"
TRACKS = (
    TRACK_HOST,
    TRACK_COMPUTE,
    TRACK_HOST_LINK,
    TRACK_IPU_LINKS,
    TRACK_GW_LINKS,
    TRACK_HOST_SYNC,
)


class TimelineEvent(NamedTuple):
    """One interval of the simulated step.

    Attributes:
        track: the resource it occupies (one of ``TRACKS``, or an IPU's ``ipu_track``).
        name: what runs.
        start: seconds from the start of the step.
        duration: seconds.
        args: ``(name, value)`` pairs describing it, for a trace's details: the step and
            micro-batch, flops and bytes, a collective's kind, method, group and link tier.
    """

    track: str
    name: str
    start: float
    duration: float
    args: tuple[tuple[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class StepSimulation:
    """Simulated time and memory of one step; pure data for reports.

    Attributes:
        model: the replica simulated: its profile and its stages.
        layout: replicas, instances and IPUs per replica.
        system: the IPU-POD.
        parameters: the model parameters used.
        phases: phase name -> seconds per step (``PHASES``; the collectives and the
            host IO as exposed on the critical path, the others as busy time).
        simulated_step_seconds: wall time of one step on the system.
        samples_per_second: samples of the whole job per second.
        memory: peak bytes per IPU by category.
        host_io_exposed_seconds: step time lost to host IO (zero when fully hidden).
        host_io_seconds: host link busy time per step.
        events: the step's intervals, for the trace.
        prefetch_depth: micro-batches the infeed keeps ahead of the compute.
        replica: the replica's stages and IPUs (``hardware.ReplicaReport``): their passes,
            stashes and each IPU's memory.
        host_compute_seconds: the host's busy time per step preparing an instance's samples
            on the POD (``hardware._host_compute``; 0 when not measured).
        run_events: every interval of the first steps of a run, from an empty infeed (the
            first step waits for its data, later ones find it prefetched), for the trace.
    """

    model: ReplicaModel
    layout: ReplicaLayout
    system: SystemSpec
    parameters: ModelParameters
    phases: dict[str, float]
    simulated_step_seconds: float
    samples_per_second: float
    memory: MemoryBreakdown
    host_io_exposed_seconds: float
    host_io_seconds: float
    events: tuple[TimelineEvent, ...]
    prefetch_depth: int
    replica: ReplicaReport
    host_compute_seconds: float = 0.0
    run_events: tuple[TimelineEvent, ...] = ()

    @property
    def profile(self) -> StepProfile:
        """The replica-wide step profile."""
        return self.model.profile

    @property
    def pipeline(self) -> ReplicaReport | None:
        """The replica's report when it runs an execution strategy (pipelined or sharded
        over its IPUs); None for a data-parallel replica (one program)."""
        return self.replica if self.model.strategy is not None else None

    @property
    def memory_per_ipu(self) -> dict[str, int]:
        """Category -> bytes per IPU."""
        return dict(self.memory.categories)

    @property
    def samples_per_step(self) -> int:
        """Samples of the whole job per step."""
        p = self.profile
        return self.layout.num_replicas * p.samples_per_update * p.device_iterations

    @property
    def ipu_bound_samples_per_second(self) -> float:
        """Throughput were the host free: the step without its exposed host compute."""
        step = self.simulated_step_seconds - self.phases.get("host_compute", 0.0)
        return self.samples_per_step / step if step > 0 else float("inf")

    @property
    def host_bound_samples_per_second(self) -> float:
        """Throughput the hosts alone allow: every instance prepares its samples in parallel
        (inf when the host's work was not measured)."""
        host = self.host_compute_seconds
        return self.samples_per_step / host if host > 0 else float("inf")

    @property
    def host_bound(self) -> bool:
        """Whether the hosts, not the IPUs, decide the throughput."""
        return self.host_bound_samples_per_second < self.ipu_bound_samples_per_second
