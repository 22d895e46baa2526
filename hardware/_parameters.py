"""The few free parameters of the model, fitted by ``benchmarks/calibrate.py``, and fixed ones.

Only the five ``ModelParameters`` are fitted to published throughput; every other number of
the model is a datasheet figure (``_specs``) or a fixed, documented assumption below that no
fit touches. The fitted values live in ``hardware/calibration.json`` so anyone can re-run
the fit and see exactly what changed.

A calibrated family (``calibration.json``'s ``families``: BERT, fitted by
``benchmarks/calibrate_bert.py`` on Graphcore's Mk2 MLPerf BERT-Large rows) replaces two of
them for its models, the sustained compute efficiency and the host synchronisation per step:
the ResNet-50 rows that fix the shared values cannot tell how busy a transformer's matmuls
keep the IPU, nor what a training loop that returns to the host after every weight update
costs there. The link latencies and the compute-set cost stay shared.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterable

CALIBRATION_FILE = pathlib.Path(__file__).with_name("calibration.json")


@dataclasses.dataclass(frozen=True)
class ModelParameters:
    """Physical parameters the datasheets do not give; fitted, then used unchanged everywhere.

    Attributes:
        compute_efficiency: sustained fraction of peak FLOP/s a compiled step reaches
            (vertex efficiency, exchange and sync phases inside the step). Prior: 0.1-0.4
            for convolutional nets on the IPU; a transformer's large matmuls reach more
            (the BERT family's own fit).
        ipu_link_latency: seconds per ring step over IPU-Links (send, sync, receive of one
            fragment), the alpha of the alpha-beta model inside an IPU-Link domain. Prior:
            microseconds (GCL figures are UNCONFIRMED).
        gw_link_latency: seconds per ring step over GW-Links between Pods (through the
            gateways), the alpha across Pods. Prior: tens of microseconds to milliseconds.
            The fit lands near 1.6 ms, far above a wire latency: it absorbs whatever a
            cross-Pod step costs beyond bandwidth (gateway synchronisation of the Pods), and
            only POD128 and POD256 constrain it, so predictions for many more Pods, where
            the ring's 2(P-1) steps dominate, are extrapolations.
        host_sync_seconds: fixed cost per step of the host synchronisation that ends a step
            (the IPUs wait for all hosts, and the host reads back results). Prior:
            0.1-1 ms per step. The BERT family's fit puts about a tenth of a second here:
            Graphcore's BERT returns to its Python loop after every weight update, which
            prepares the next step's arrays, reads the outputs and writes the step's
            learning rate to the IPUs (``updateOptimizerFromHost``) while they wait.
        compute_set_seconds: fixed cost of one compute set beyond its arithmetic: the BSP
            synchronisation of all tiles that ends it and the set-up of the exchange phase
            that follows (Jia, Tillman, Maggioni and Scarpazza, "Dissecting the Graphcore
            IPU Architecture via Microbenchmarking", arXiv:1912.03413, 2019, measure the
            IPU's on-chip sync and exchange latencies in the sub-microsecond to microsecond
            range). Each primitive operation of the profiled step counts as one compute
            set. Counted in cycles of the Mk2 GC200's 1.33 GHz clock (``CLOCK_OF_FIT_HZ``),
            so a faster IPU pays it in proportionally less time. Prior: 1 microsecond;
            fitted with the others (the ResNet-50 rows alone cannot separate it from
            ``compute_efficiency``: see the README).
    """

    compute_efficiency: float = 0.2
    ipu_link_latency: float = 5e-6
    gw_link_latency: float = 1e-4
    host_sync_seconds: float = 3e-4
    compute_set_seconds: float = 1e-6

    def __post_init__(self) -> None:
        if not 0.0 < self.compute_efficiency <= 1.0:
            raise ValueError(
                f"`compute_efficiency` must be in (0, 1], got {self.compute_efficiency}: it is "
                "a fraction of peak FLOP/s."
            )
        for name in (
            "ipu_link_latency",
            "gw_link_latency",
            "host_sync_seconds",
            "compute_set_seconds",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"`{name}` must be >= 0 seconds, got {getattr(self, name)}.")

    def to_json(self) -> dict[str, float]:
        """The parameters as a JSON-ready dict."""
        return dataclasses.asdict(self)


def load_parameters(path: str | pathlib.Path | None = None, *, model: str = "") -> ModelParameters:
    """The fitted parameters from ``path`` (default: the packaged calibration.json).

    ``model`` is the model's name in reports: a model of a calibrated family (its name holds
    the family's, as "BERT-large" holds "BERT") gets that family's fitted parameters in place
    of the shared ones (``calibration_family``). Falls back to the priors of
    ``ModelParameters`` when no calibration file exists, so a fresh checkout still runs
    before anyone has calibrated.
    """
    file = pathlib.Path(path) if path is not None else CALIBRATION_FILE
    if not file.exists():
        return ModelParameters()
    data = json.loads(file.read_text())
    fields = {f.name for f in dataclasses.fields(ModelParameters)}
    values = {k: float(v) for k, v in data.get("parameters", {}).items() if k in fields}
    family, record = family_record(data, model)
    if family:
        own = record.get("parameters", {})
        values.update({k: float(v) for k, v in own.items() if k in fields})
    return ModelParameters(**values)


def family_record(data: dict, model: str) -> tuple[str | None, dict]:
    """``model``'s calibrated family in a calibration file's ``data`` and that family's
    record, or (None, the shared record ``data``)."""
    families = data.get("families", {})
    family = calibration_family(model, families)
    return family, (families[family] if family else data)


def calibration_family(model: str, families: Iterable[str]) -> str | None:
    """The calibrated family ``model`` belongs to: the first whose name its name holds
    (case and ``_``/``-`` ignored), or None (the shared parameters apply)."""
    name = model.lower().replace("_", "-")
    if not name:
        return None
    return next((f for f in families if f.lower().replace("_", "-") in name), None)


# Fixed assumptions (never fitted). Each is a round number with its reasoning.

# Transcendentals (exp, log, rsqrt) per tile per cycle: one, on the tile's FPU. UNCONFIRMED.
TRANSCENDENTALS_PER_TILE_CYCLE = 1.0
# Vertex code and descriptors per primitive op on each tile: Poplar spreads each op over all
# tiles and each tile keeps the code and edge descriptors of its share. UNCONFIRMED.
CODE_BYTES_PER_OP_PER_TILE = 16
# Exchange code per tile per collective and per doubling of the replica count: GCL builds
# its ring schedules per peer set, so exchange code grows with replicas (MPO section 7.7,
# "Memory for more replicas"). UNCONFIRMED magnitude.
EXCHANGE_CODE_BYTES_PER_TILE = 256
# The clock the fitted per-cycle parameters were measured at (the Mk2 GC200 of every
# published row): MLPerf v1.1 Graphcore/systems/ipu-pod16-POPART-closed.json.
CLOCK_OF_FIT_HZ = 1.33e9
# Input the infeed keeps in flight ahead of the one being computed: the project's one default
# (PopTorch's default prefetch depth is also 3); the runtime's Options and Infeed follow it.
DEFAULT_PREFETCH_DEPTH = 3
# The POD's host servers, for the host's share of a step (never fitted). MLPerf Training v1.1,
# Graphcore's system descriptions (mlcommons/training_results_v1.1, Graphcore/systems): two
# AMD EPYC 7742 of 64 cores per host; its ResNet-50 launch lines use one host per 16 IPUs
# (1 for POD16, 4 for POD64, 8 for POD128, 16 for POD256).
HOST_CORES = 128
IPUS_PER_HOST = 16
# A POD host core's speed at the data loader's work relative to a core of the machine that
# measured it. The machines this project is measured on report AMD EPYC cores too; equal
# speed is assumed. UNCONFIRMED: scale a measurement from a slower or faster machine by hand.
HOST_SPEED_FACTOR = 1.0
