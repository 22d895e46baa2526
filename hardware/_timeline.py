"""The simulated timeline of one training step on an IPU-POD.

Replicas are symmetric, so one representative replica's IPU stands for all of them. The
IPU runs, for each weight update, ``gradient_accumulation`` micro-batches (compute, then
accumulate), the gradient collectives, the optimiser-state streaming and the update; a step
of ``device_iterations`` updates ends with a host synchronisation. The infeed streams each
micro-batch over the machine's host links on its own lane, up to ``prefetch_depth``
micro-batches ahead of the compute and across step boundaries, so host IO hides behind
compute as far as the buffers allow; what remains is the exposed host IO. The host's CPU
prepares each step's samples on a lane of its own (``hardware._host_compute``), ahead of the
IPUs as far as the loader prefetches; what the IPUs wait for is the exposed host compute.

References:
    PopART glossary (step = device iterations x (gradient accumulation x micro-batch));
    Memory and Performance Optimisation guide sections 7.3 (constant vs scaling parts of a
    step) and 7.5 (host I/O, prefetch).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from hardware._collectives import CollectiveTime, collective_time
from hardware._compute import compute_seconds
from hardware._host_compute import host_compute_seconds
from hardware._host_io import host_io_seconds
from hardware._layout import ReplicaLayout
from hardware._memory import optimiser_shards
from hardware._parameters import ModelParameters
from hardware._pipeline import PipelineSchedule
from hardware._specs import SystemSpec
from hardware._step_profile import CollectiveRecord, StepProfile
from hardware._step_simulation import (
    _PHASE_OF_KIND,
    PHASES,
    TRACK_COMPUTE,
    TRACK_GW_LINKS,
    TRACK_HOST,
    TRACK_HOST_LINK,
    TRACK_HOST_SYNC,
    TRACK_IPU_LINKS,
    TimelineEvent,
)


class Durations(NamedTuple):
    """Seconds of each part of one step, as the timeline schedules them."""

    host: float
    io: float
    compute: float
    accumulate: float
    collectives: tuple[tuple[CollectiveTime, CollectiveRecord], ...]
    update: float
    streaming: float
    sync: float
    output: float = 0.0  # device-to-host copy of one returned micro-batch's outputs


def durations(
    profile: StepProfile,
    layout: ReplicaLayout,
    system: SystemSpec,
    params: ModelParameters,
    pipe: PipelineSchedule,
) -> Durations:
    """Seconds of each part of a step, the replica's compute from its stages' schedule
    (``pipe``: one micro-batch's share of an update's passes)."""
    ipu, k = system.ipu, layout.ipus_per_replica
    # acc += grad reads two tensors and writes one, at In-Processor-Memory bandwidth; each
    # IPU adds its own stages' gradients, the fullest IPU decides.
    on_ipu: dict[int, int] = {}
    for cost in pipe.stages:
        on_ipu[cost.ipu] = on_ipu.get(cost.ipu, 0) + cost.stage.gradient_bytes
    accumulate = (
        3 * max(on_ipu.values()) / ipu.memory_bandwidth
        if profile.gradient_accumulation > 1
        else 0.0
    )
    shards = optimiser_shards(profile, layout)
    update = compute_seconds(
        profile.update_flops / shards,
        profile.update_bytes_accessed / shards,
        0.0,
        ipu,
        profile.precision,
        params,
        num_ipus=k,
    )
    # Offloaded optimiser state is read from and written back to Streaming Memory each
    # update, over the machine's gateway bandwidth shared by its IPUs.
    per_ipu_stream = system.machine.streaming_bandwidth / system.machine.ipus
    streaming = (
        2 * profile.optimiser_state_bytes / shards / k / per_ipu_stream
        if profile.offload_optimiser_state
        else 0.0
    )
    collectives = tuple(
        (collective_time(r, layout, system, params), r)
        for r in profile.collectives
        if layout.num_replicas > 1
    )
    io = host_io_seconds(
        profile.host_bytes_per_micro_batch, system, layout.num_replicas, layout.ipus_per_replica
    )
    # The link is full duplex (PCIe, the gateway's RoCE): outputs go back on their own lane.
    output = host_io_seconds(
        profile.host_output_bytes_per_micro_batch,
        system,
        layout.num_replicas,
        layout.ipus_per_replica,
    )
    return Durations(
        host_compute_seconds(profile, layout),
        io,
        pipe.micro_batch_seconds,
        accumulate,
        collectives,
        update,
        streaming,
        params.host_sync_seconds + multi_ipu_sync_calls(layout) * params.multi_ipu_sync_seconds,
        output,
    )


def _run_steps(
    d: Durations, profile: StepProfile, depth: int, steps: int
) -> tuple[list[TimelineEvent], list[float]]:
    """Event-driven schedule of ``steps`` consecutive steps; returns (events, step ends).

    Lanes: the host's CPU prepares each step's samples (ahead of the IPUs by up to ``depth``
    steps with ``profile.host_prefetch``, else between calls), the host link streams every
    micro-batch (``depth`` micro-batches ahead), the IPUs compute, then the collectives,
    the update and the host synchronisation.
    """
    events: list[TimelineEvent] = []
    step_ends: list[float] = []
    step_starts: list[float] = []
    compute_ends: list[float] = []
    host_free = 0.0  # host CPU lane
    io_free = 0.0  # host link lane, host to device
    out_free = 0.0  # host link lane, device to host
    n_micro = profile.gradient_accumulation * profile.device_iterations
    every = n_micro // profile.outputs_per_step  # each every-th micro-batch's outputs return
    t = 0.0  # IPU lane
    j = 0  # micro-batch counter over all steps
    for s in range(steps):
        ready = 0.0
        if d.host > 0:
            if profile.host_prefetch:
                # As the infeed's buffers: step s's batch is prepared once step s - depth - 1
                # has taken its batch (begun).
                freed_step = step_starts[s - depth - 1] if s - depth - 1 >= 0 else 0.0
                host_start = max(host_free, freed_step)
            else:
                host_start = max(host_free, t)  # between calls: after the previous step
            host_free = ready = host_start + d.host
            samples = profile.samples_per_update * profile.device_iterations
            events.append(
                TimelineEvent(
                    TRACK_HOST,
                    "host_compute",
                    host_start,
                    d.host,
                    (("step", s), ("samples_per_replica", samples)),
                )
            )
        first = True
        for _ in range(profile.device_iterations):
            for _ in range(profile.gradient_accumulation):
                # Buffer j is free once micro-batch j - depth - 1 has been consumed.
                freed = compute_ends[j - depth - 1] if j - depth - 1 >= 0 else 0.0
                io_start = max(io_free, freed, ready)
                io_free = io_start + d.io
                if d.io > 0:
                    io_args = (
                        ("step", s),
                        ("micro_batch", j),
                        ("bytes_per_replica", profile.host_bytes_per_micro_batch),
                    )
                    events.append(
                        TimelineEvent(TRACK_HOST_LINK, "host_io", io_start, d.io, io_args)
                    )
                start = max(t, io_free, ready)
                if first:
                    step_starts.append(start)
                    first = False
                events.append(
                    TimelineEvent(
                        TRACK_COMPUTE,
                        "compute",
                        start,
                        d.compute,
                        (
                            ("step", s),
                            ("micro_batch", j),
                            ("flops", profile.grad_flops),
                            ("bytes_accessed", profile.grad_bytes_accessed),
                        ),
                    )
                )
                t = start + d.compute
                compute_ends.append(t)
                if d.output > 0 and (j % n_micro + 1) % every == 0:
                    out_start = max(out_free, t)
                    out_free = out_start + d.output
                    out_args = (
                        ("step", s),
                        ("micro_batch", j),
                        ("direction", "device to host"),
                        ("bytes_per_replica", profile.host_output_bytes_per_micro_batch),
                    )
                    events.append(
                        TimelineEvent(TRACK_HOST_LINK, "host_io", out_start, d.output, out_args)
                    )
                if d.accumulate > 0:
                    events.append(
                        TimelineEvent(
                            TRACK_COMPUTE,
                            "gradient_accumulation",
                            t,
                            d.accumulate,
                            (("step", s), ("micro_batch", j), ("bytes", profile.gradient_bytes)),
                        )
                    )
                    t += d.accumulate
                j += 1
            for cost, record in d.collectives:
                kind = record.kind
                about = (
                    ("step", s),
                    ("kind", kind),
                    ("method", record.method),
                    ("group", record.group),
                    ("bytes", record.bytes),
                )
                if cost.ipu_links > 0:
                    events.append(
                        TimelineEvent(
                            TRACK_IPU_LINKS,
                            kind,
                            t,
                            cost.ipu_links,
                            (*about, ("tier", "IPU-Links")),
                        )
                    )
                if cost.gw_links > 0:
                    events.append(
                        TimelineEvent(
                            TRACK_GW_LINKS,
                            kind,
                            t + cost.ipu_links,
                            cost.gw_links,
                            (*about, ("tier", "GW-Links")),
                        )
                    )
                t += cost.total
            state = profile.optimiser_state_bytes
            update = (
                ("step", s),
                ("flops", profile.update_flops),
                ("bytes_accessed", profile.update_bytes_accessed),
            )
            passes: tuple[tuple[str, float, tuple[tuple[str, Any], ...]], ...] = (
                ("streaming", d.streaming / 2, (("step", s), ("bytes_in", state))),
                ("weight_update", d.update, update),
            )
            for name, seconds, info in passes:
                if seconds > 0:
                    events.append(TimelineEvent(TRACK_COMPUTE, name, t, seconds, info))
                    t += seconds
            if d.streaming > 0:
                events.append(
                    TimelineEvent(
                        TRACK_COMPUTE,
                        "streaming",
                        t,
                        d.streaming / 2,
                        (("step", s), ("bytes_out", state)),
                    )
                )
                t += d.streaming / 2
        t = max(t, out_free)  # the call returns once its outputs are on the host
        if d.sync > 0:
            events.append(TimelineEvent(TRACK_HOST_SYNC, "host_sync", t, d.sync, (("step", s),)))
            t += d.sync
        step_ends.append(t)
    return events, step_ends


def multi_ipu_sync_calls(layout: ReplicaLayout) -> int:
    """Host calls per step that pay ``ModelParameters.multi_ipu_sync_seconds``: the step's
    one call when a replica spans several IPUs (a pipelined or sharded model), else none."""
    return 1 if layout.ipus_per_replica > 1 else 0


def host_link_seconds(d: Durations, profile: StepProfile) -> float:
    """The host link's busy time per step: every micro-batch's inputs and the returned
    outputs (their lanes run at once, so this is the busier lane's time, not their sum)."""
    n_micro = profile.gradient_accumulation * profile.device_iterations
    return max(n_micro * d.io, profile.outputs_per_step * d.output)


def samples_per_second(profile: StepProfile, layout: ReplicaLayout, step_seconds: float) -> float:
    """The job's throughput: every replica's samples of one step over the step's seconds."""
    samples = layout.num_replicas * profile.samples_per_update * profile.device_iterations
    return samples / step_seconds if step_seconds > 0 else float("inf")


def step_phases(
    d: Durations, profile: StepProfile, exposed_io: float, exposed_host: float = 0.0
) -> dict[str, float]:
    """Seconds per step in each of ``PHASES``: every micro-batch's compute and accumulation,
    each update's collectives, weight update and streaming, the exposed host compute and
    host IO and the one host synchronisation (a pipelined step replaces the compute with
    its schedule's)."""
    n_micro = profile.gradient_accumulation * profile.device_iterations
    phases: dict[str, float] = dict.fromkeys(PHASES, 0.0)
    phases["host_compute"] = exposed_host
    phases["host_io"] = exposed_io
    phases["compute"] = n_micro * d.compute
    phases["gradient_accumulation"] = n_micro * d.accumulate
    for cost, record in d.collectives:
        phases[_PHASE_OF_KIND[record.kind]] += profile.device_iterations * cost.total
    phases["weight_update"] = profile.device_iterations * d.update
    phases["streaming"] = profile.device_iterations * d.streaming
    phases["host_sync"] = d.sync
    return phases


def _steady_step(
    d: Durations, profile: StepProfile, depth: int
) -> tuple[tuple[TimelineEvent, ...], float, tuple[TimelineEvent, ...]]:
    """A step in the steady state, once the host and the infeed have run ahead as far as
    they can (as in a running job): the second of two steps, or with host compute the last
    of ``depth + 2`` (the host's lane runs ahead by whole steps)."""
    steps = max(depth, 1) + 2 if d.host > 0 else 2
    events, ends = _run_steps(d, profile, depth, steps)
    start, end = ends[-2], ends[-1]
    # Host IO that ran before the step began was prefetched during earlier steps; the host's
    # CPU work is drawn where it overlaps the step (it runs ahead, often across steps).
    shifted = []
    for e in events:
        if start <= e.start < end:
            shifted.append(e._replace(start=e.start - start))
        elif e.track == TRACK_HOST and e.start < start < e.start + e.duration:
            shifted.append(e._replace(start=0.0, duration=min(e.start + e.duration, end) - start))
    return tuple(shifted), end - start, tuple(events)


def exposed_host_times(
    d: Durations, profile: StepProfile, depth: int
) -> tuple[tuple[TimelineEvent, ...], float, float, float, tuple[TimelineEvent, ...]]:
    """The steady step's events and seconds, and the host compute and host IO it exposes:
    what the step loses to each against the same step without it."""
    events, step_seconds, run_events = _steady_step(d, profile, depth)
    without_host = (
        _steady_step(d._replace(host=0.0), profile, depth)[1] if d.host > 0 else step_seconds
    )
    _, without_both, _ = _steady_step(d._replace(host=0.0, io=0.0, output=0.0), profile, depth)
    if step_seconds - without_host <= 1e-9 * without_host:
        # Hidden host work: the same step, whose absolute times were only shifted by the
        # first step's preparation (which rounds their differences in the last bits).
        step_seconds = without_host
    exposed_host = max(step_seconds - without_host, 0.0)
    exposed_io = max(without_host - without_both, 0.0)
    return events, step_seconds, exposed_io, exposed_host, run_events
