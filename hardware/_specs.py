"""IPU, IPU-Machine and IPU-POD specifications as data, each figure with its source.

Each figure cites the public document it comes from. "derived" marks arithmetic on cited
figures; UNCONFIRMED marks a figure no Graphcore source confirmed (third-party notes or an
assumption made here), so a reader knows which numbers to distrust first.

References:
    IPU-POD64 datasheet (product-description.html); IPU-POD128 datasheet; Bow-2000
    datasheet (overview.html); IPU-POD DA build and test guide (pod_da_kit.html); MLPerf
    Training v1.1 / v2.0 Graphcore system descriptions (clocks); Memory and Performance
    Optimisation guide, section 2.1 (exchange bandwidth).
"""

from __future__ import annotations

import dataclasses
import types

GB = 1e9  # decimal gigabyte, as the datasheets count


@dataclasses.dataclass(frozen=True)
class IpuSpec:
    """One IPU processor.

    Attributes:
        name: product name.
        tiles: tiles (cores) per IPU.
        sram_per_tile: In-Processor-Memory per tile, bytes.
        in_processor_memory: In-Processor-Memory per IPU, bytes.
        clock_hz: tile clock.
        peak_fp16_flops: peak FP16.16 FLOP/s (multiply and add counted as 2, as XLA does).
        peak_fp32_flops: peak FP32 FLOP/s.
        memory_bandwidth: In-Processor-Memory bandwidth, bytes/s.
        ipu_links: IPU-Links per IPU.
        ipu_link_bandwidth: bytes/s per IPU-Link and direction.
        sources: field name -> where its value comes from.
    """

    name: str
    tiles: int
    sram_per_tile: int
    in_processor_memory: int
    clock_hz: float
    peak_fp16_flops: float
    peak_fp32_flops: float
    memory_bandwidth: float
    ipu_links: int
    ipu_link_bandwidth: float
    sources: types.MappingProxyType = dataclasses.field(compare=False, repr=False)

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s for ``precision`` ("float16" or "float32")."""
        if precision in ("float16", "bfloat16"):
            return self.peak_fp16_flops
        if precision == "float32":
            return self.peak_fp32_flops
        raise ValueError(
            f"`precision` must be 'float16' or 'float32', got {precision!r}: pass the dtype of "
            "the model's weights."
        )


@dataclasses.dataclass(frozen=True)
class MachineSpec:
    """One IPU-Machine (1U blade of 4 IPUs with its gateway).

    Attributes:
        name: product name.
        ipu: the IPUs it holds.
        ipus: IPUs per machine.
        streaming_memory: gateway DDR ("Streaming Memory") per machine, bytes.
        streaming_bandwidth: gateway bandwidth between Streaming Memory and the IPUs, bytes/s.
        host_links: host links (RoCE NICs) per machine.
        host_link_bandwidth: bytes/s per host link.
        gw_links: GW-Links per machine (to other Pods).
        gw_link_bandwidth: bytes/s per GW-Link and direction.
        sources: field name -> where its value comes from.
    """

    name: str
    ipu: IpuSpec
    ipus: int
    streaming_memory: int
    streaming_bandwidth: float
    host_links: int
    host_link_bandwidth: float
    gw_links: int
    gw_link_bandwidth: float
    sources: types.MappingProxyType = dataclasses.field(compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class SystemSpec:
    """An IPU-POD: machines joined by IPU-Links inside domains and GW-Links between them.

    Attributes:
        name: the ``--system`` name, e.g. ``pod64`` or ``bow-pod256``.
        machine: the machines it is built of.
        num_machines: machines in the system.
        link_domain_ipus: IPUs per IPU-Link domain (a POD64 at most: ``ipuLinkDomainSize``).
        switched_gw_links: whether Pods are joined through GW-Link switches (Pod256 and
            larger) rather than directly.
    """

    name: str
    machine: MachineSpec
    num_machines: int
    link_domain_ipus: int
    switched_gw_links: bool

    @property
    def ipu(self) -> IpuSpec:
        """The IPU of every machine."""
        return self.machine.ipu

    @property
    def num_ipus(self) -> int:
        """IPUs in the whole system."""
        return self.num_machines * self.machine.ipus

    @property
    def num_link_domains(self) -> int:
        """IPU-Link domains (Pods joined by GW-Links)."""
        return self.num_ipus // self.link_domain_ipus


class SystemSelectionError(ValueError):
    """A system name that does not exist, or a job that does not fit its system."""


_GC200_SOURCES = types.MappingProxyType(
    {
        "tiles": "1,472 tiles: hexus.net 144154; itpro.com 356474",
        "sram_per_tile": "624 KiB per tile: third-party notes only (convergedigest 2020/07); "
        "UNCONFIRMED by Graphcore",
        "in_processor_memory": "900 MB per IPU: hexus; convergedigest",
        "clock_hz": "1.33 GHz: MLPerf v1.1 Graphcore/systems/ipu-pod16-POPART-closed.json",
        "peak_fp16_flops": "250 TFLOPS FP16.16: itpro; POD64 15.978 PF / 64 = 249.7 TF (derived)",
        "peak_fp32_flops": "62.4 TFLOPS: POD64 3.994 PF FP32 / 64 (derived)",
        "memory_bandwidth": "47.5 TB/s per IPU: hexus",
        "ipu_links": "10 IPU-Links per IPU: thecharlieblake.co.uk/ipus; UNCONFIRMED",
        "ipu_link_bandwidth": "32 GB/s per link and direction: 320 GB/s per IPU / 10 links, "
        "and Bow-2000's 512 Gbps per link counted both ways (derived); UNCONFIRMED",
    }
)

GC200 = IpuSpec(
    name="Mk2 GC200",
    tiles=1472,
    sram_per_tile=624 * 1024,
    in_processor_memory=900 * 10**6,
    clock_hz=1.33e9,
    peak_fp16_flops=250e12,
    peak_fp32_flops=62.4e12,
    memory_bandwidth=47.5e12,
    ipu_links=10,
    ipu_link_bandwidth=32 * GB,
    sources=_GC200_SOURCES,
)

_BOW_CLOCK_RATIO = 1.85 / 1.33  # Bow IPU is a GC200 die on wafer-on-wafer power delivery

BOW_IPU = IpuSpec(
    name="Bow IPU",
    tiles=1472,
    sram_per_tile=624 * 1024,
    in_processor_memory=900 * 10**6,
    clock_hz=1.85e9,
    peak_fp16_flops=350e12,
    peak_fp32_flops=62.4e12 * _BOW_CLOCK_RATIO,
    memory_bandwidth=47.5e12 * _BOW_CLOCK_RATIO,
    ipu_links=10,
    ipu_link_bandwidth=32 * GB,
    sources=types.MappingProxyType(
        {
            **_GC200_SOURCES,
            "in_processor_memory": "3.6 GB In-Processor-Memory per Bow-2000 / 4 IPUs: Bow-2000 "
            "datasheet (derived)",
            "clock_hz": "1.85 GHz: MLPerf v2.0 Graphcore/systems/ipu-pod16-POPART-closed.json",
            "peak_fp16_flops": "1.4 PFLOPS FP16.16 per Bow-2000 / 4 IPUs: Bow-2000 datasheet "
            "(derived)",
            "peak_fp32_flops": "GC200's 62.4 TF scaled by the clock ratio 1.85/1.33 (derived); "
            "UNCONFIRMED",
            "memory_bandwidth": "GC200's 47.5 TB/s scaled by the clock ratio (derived); "
            "UNCONFIRMED",
            "ipu_link_bandwidth": "IPU-Link 512 Gbps: Bow-2000 datasheet, counted as 32 GB/s "
            "each way (derived)",
        }
    ),
)

_MACHINE_SOURCES = {
    "ipus": "4 IPUs per machine: hexus; Bow-2000 datasheet",
    "host_links": "2 RNIC, 100 GbE RoCEv2 to the host: pod_da_kit.html",
    "host_link_bandwidth": "100 Gb/s = 12.5 GB/s per RNIC",
    "gw_links": "2 GW-Links per machine: pod_da_kit.html; Bow-2000 datasheet",
    "gw_link_bandwidth": "100 Gb/s per GW-Link: Bow-2000 datasheet (2 x 100 Gbps); the M2000 "
    "figure is UNCONFIRMED and assumed the same",
    "streaming_bandwidth": "IPU-Gateway 2.8 Tbps = 350 GB/s per machine: convergedigest; "
    "how it splits between Streaming Memory and links is UNCONFIRMED",
}

IPU_M2000 = MachineSpec(
    name="IPU-M2000",
    ipu=GC200,
    ipus=4,
    streaming_memory=448 * 10**9,
    streaming_bandwidth=350 * GB,
    host_links=2,
    host_link_bandwidth=12.5 * GB,
    gw_links=2,
    gw_link_bandwidth=12.5 * GB,
    sources=types.MappingProxyType(
        {**_MACHINE_SOURCES, "streaming_memory": "448 GB: itpro ('up to 450 GB': hexus)"}
    ),
)

# The Bow-2000 is the IPU-M2000's chassis, gateway and links with four Bow IPUs and up to
# 256 GB of Streaming Memory (Bow-2000 datasheet).
BOW_2000 = dataclasses.replace(
    IPU_M2000,
    name="Bow-2000",
    ipu=BOW_IPU,
    streaming_memory=256 * 10**9,
    sources=types.MappingProxyType(
        {**_MACHINE_SOURCES, "streaming_memory": "up to 256 GB: Bow-2000 datasheet"}
    ),
)

POD64_IPUS = 64
MAX_POD64S = 1024  # "scales to 1,024 POD64s (65,536 IPUs)": POD64 datasheet


def _pod_sizes() -> tuple[int, ...]:
    # The products: IPU-POD16, then POD64s and multiples of them up to 1,024 POD64s.
    sizes, ipus = [16], POD64_IPUS
    while ipus <= POD64_IPUS * MAX_POD64S:
        sizes.append(ipus)
        ipus *= 2
    return tuple(sizes)


POD_SIZES = _pod_sizes()


def _build_systems() -> dict[str, SystemSpec]:
    systems = {}
    for prefix, machine in (("pod", IPU_M2000), ("bow-pod", BOW_2000)):
        for ipus in POD_SIZES:
            systems[f"{prefix}{ipus}"] = SystemSpec(
                name=f"{prefix}{ipus}",
                machine=machine,
                num_machines=ipus // machine.ipus,
                link_domain_ipus=min(ipus, POD64_IPUS),
                # Pod256 and larger join their POD64s through GW-Link switches.
                switched_gw_links=ipus >= 4 * POD64_IPUS,
            )
    return systems


SYSTEMS: types.MappingProxyType = types.MappingProxyType(_build_systems())


def get_system(name: str) -> SystemSpec:
    """The system called ``name`` (``pod16`` ... ``pod65536``, ``bow-pod16`` ...).

    Raises:
        SystemSelectionError: for an unknown name, listing the valid ones.
    """
    key = name.strip().lower().replace("ipu-", "").replace("_", "-")
    try:
        return SYSTEMS[key]
    except KeyError:
        raise SystemSelectionError(
            f"--system {name!r} is not a known IPU-POD: use one of pod16, pod64, pod128, ..., "
            f"pod{POD64_IPUS * MAX_POD64S} (doubling) or bow-pod16, bow-pod64, ..., "
            f"bow-pod{POD64_IPUS * MAX_POD64S}."
        ) from None


def default_system(num_ipus: int) -> SystemSpec:
    """The smallest Mk2 IPU-POD that holds ``num_ipus`` IPUs (at least a POD16).

    Raises:
        SystemSelectionError: when no POD is large enough.
    """
    largest = POD64_IPUS * MAX_POD64S
    if not 1 <= num_ipus <= largest:
        raise SystemSelectionError(
            f"the job needs {num_ipus} IPUs but the largest IPU-POD has {largest} IPUs "
            f"(1,024 POD64s): use at most {largest} replicas x IPUs per replica."
        )
    size = next(size for size in POD_SIZES if size >= num_ipus)
    return SYSTEMS[f"pod{size}"]


def select_system(name: str, num_ipus: int) -> SystemSpec:
    """The system a job runs on: ``name`` (``--system``) or, if empty, the default one.

    This is what the launcher calls before starting anything; it is cheap and JAX-free.

    Raises:
        SystemSelectionError: for an unknown name, or a job needing more IPUs than the system has.
    """
    if not name:
        return default_system(num_ipus)
    system = get_system(name)
    if num_ipus > system.num_ipus:
        prefix = system.name[: -len(str(system.num_ipus))]
        sizes = [size for size in POD_SIZES if size >= num_ipus]
        fix = f"use --system {prefix}{sizes[0]}" if sizes else "use fewer replicas"
        raise SystemSelectionError(
            f"the job needs {num_ipus} IPUs (replicas x IPUs per replica) but --system "
            f"{system.name} has only {system.num_ipus} IPUs: {fix}, or reduce --num-replicas."
        )
    return system
