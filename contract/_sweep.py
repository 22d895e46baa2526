"""The sweep request: what ``poprun-emu-scaling`` asks a program's simulation to evaluate.

Two processes share it: the scaling CLI (``popdist_emu.scaling``), which writes the request
and must start without JAX so that a bad argument is refused at once, and the program's
instance, whose simulation (``popdist_emu.sim``) evaluates every point from its one compiled
step. A request is a JSON file named by ``POPDIST_EMU_SCALING_REQUEST``: the points, and the
file the answer goes to. This module is that contract's one owner: the point's fields, how a
point's system is chosen, and which phases are collectives (split by link tier per point).

References:
    Graphcore PopRun user guide (``--num-replicas``, ``--num-instances``,
    ``--ipus-per-replica``, ``--offline-mode``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, SupportsIndex, SupportsInt

import hardware
from contract._files import write_atomically


def _as_int(value: object) -> int:
    """``int(value)`` for a JSON number or numeric string (``int``'s own error otherwise)."""
    if isinstance(value, str | bytes | bytearray | SupportsInt | SupportsIndex):
        return int(value)
    raise TypeError(
        "int() argument must be a string, a bytes-like object or a real number, not "
        f"'{type(value).__name__}'"
    )


# The phases (``hardware.PHASES`` names) that are collectives, split by link tier per point.
COLLECTIVE_PHASES = ("allreduce", "reduce_scatter", "all_gather", "broadcast")
# What the scaling report calls a point's collectives once they are split by link tier.
TIER_PHASES = {"ipu_links": "collectives over IPU-Links", "gw_links": "collectives over GW-Links"}


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    """One layout of a sweep, as ``poprun-emu --offline-mode`` of it would be launched.

    Attributes:
        replicas: ``--num-replicas``.
        instances: ``--num-instances``.
        ipus_per_replica: ``--ipus-per-replica``.
        system: ``--system`` (a name from ``hardware.SYSTEMS``; empty where none holds it).
        global_batch: strong scaling's samples per weight update (the point's gradient
            accumulation follows from it); None keeps the program's own accumulation.
        parameters: fitted parameters (``hardware.ModelParameters`` names) the point is
            simulated with instead of the calibrated ones, as ``(name, value)`` pairs; empty
            for none. ``benchmarks/row_features.py`` probes a row's step at several values
            from one compiled program this way.
    """

    replicas: int
    instances: int
    ipus_per_replica: int
    system: str
    global_batch: int | None = None
    parameters: tuple[tuple[str, float], ...] = ()

    @property
    def num_ipus(self) -> int:
        """IPUs the point's job uses."""
        return self.replicas * self.ipus_per_replica

    def layout(self) -> hardware.ReplicaLayout:
        """The point's layout; raises ``hardware.LayoutError`` where PopRun would refuse it."""
        return hardware.ReplicaLayout(
            num_replicas=self.replicas,
            num_instances=self.instances,
            ipus_per_replica=self.ipus_per_replica,
        )

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> SweepPoint:
        """The point a request holds (the fields of :func:`dataclasses.asdict`)."""
        batch = data.get("global_batch")
        values: Any = data.get("parameters") or ()  # JSON: name-value pairs, or a dict
        pairs = values.items() if isinstance(values, Mapping) else values
        return cls(
            replicas=_as_int(data["replicas"]),
            instances=_as_int(data["instances"]),
            ipus_per_replica=_as_int(data["ipus_per_replica"]),
            system=str(data.get("system") or ""),
            global_batch=None if batch is None else _as_int(batch),
            parameters=tuple((str(name), float(value)) for name, value in pairs),
        )


def system_name(ipu: str, system: str, num_ipus: int) -> str:
    """The ``--system`` a point runs on: the one given, else the smallest POD of ``ipu``.

    Raises:
        hardware.SystemSelectionError: no POD is large enough.
    """
    if system:
        return system
    name = hardware.default_system(num_ipus).name
    return name if ipu == "mk2" else f"{ipu}-{name}"


def write_request(path: str, points: Sequence[SweepPoint], result: str) -> None:
    """Writes a request for ``points`` whose answer goes to ``result`` (atomically)."""
    request = {"points": [dataclasses.asdict(p) for p in points], "result": result}
    write_atomically(path, json.dumps(request))


def read_request(path: str) -> tuple[list[SweepPoint], str]:
    """The points of the request at ``path`` and the file its answer goes to."""
    with open(path) as f:
        request = json.load(f)
    return [SweepPoint.from_json(p) for p in request["points"]], str(request["result"])
