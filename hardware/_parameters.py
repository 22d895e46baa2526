"""The few free parameters of the model, fitted by ``benchmarks/calibrate*.py``, and fixed ones.

Only the seven ``ModelParameters`` are fitted to published throughput; every other number of
the model is a datasheet figure (``_specs``) or a fixed, documented assumption below that no
fit touches. The fitted values live in ``hardware/calibration.json`` so anyone can re-run
the fit and see exactly what changed.

Every program runs with the same parameters; what a program's structure shows decides how
much each one weighs, never its name. The shared fit (``benchmarks/calibrate.py``, on
MLPerf ResNet-50 rows) sets five of them; the BERT fit (``benchmarks/calibrate_bert.py``,
on Graphcore's Mk2 MLPerf BERT-Large rows) sets the two that the ResNet-50 rows cannot see:
the sustained efficiency of matmul FLOPs (a transformer's large matmuls keep the AMP units
busier than convolutions and normalisations do; a program's FLOPs are split by its
operations' classes) and the fixed cost of the host call that ends a step of a replica
spread over several IPUs (paid by a pipelined or sharded replica, once per call, so a
program that runs many weight updates per call amortises it). ``calibration.json``'s
``families`` keep each fit's rows and the whole-program values a user may ask for instead
(``load_parameters(family=...)``, ``poprun-emu --calibration-family``): the old way, one
family's fitted values applied to every FLOP and step of the program.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

CALIBRATION_FILE = pathlib.Path(__file__).with_name("calibration.json")


def calibration_file(path: str | pathlib.Path | None = None) -> pathlib.Path:
    """``path``, else the packaged file. A job refitted by ``--calibrate-from`` names its own
    file through ``Options.calibration_file``: the model reads no environment."""
    return CALIBRATION_FILE if path is None else pathlib.Path(path)


# The name of the shared fit's parameter set, as --calibration-family takes it.
SHARED_FAMILY = "ResNet-50"


class UnknownFamilyError(ValueError):
    """A ``--calibration-family`` (``Options.calibration_family``) that names no fit."""


@dataclasses.dataclass(frozen=True)
class ModelParameters:
    """Physical parameters the datasheets do not give; fitted, then used unchanged everywhere.

    Attributes:
        compute_efficiency: sustained fraction of peak FLOP/s that a compiled step's FLOPs
            outside matmuls reach (convolutions, normalisations, element-wise work; vertex
            efficiency, exchange and sync phases inside the step). Prior: 0.1-0.4 for
            convolutional nets on the IPU.
        matmul_efficiency: the same for the FLOPs of the step's matmuls (``ConvOp.kind``
            ``"matmul"``: dense and batched ``dot_general``, attention included). A large
            matmul keeps the AMP units busier than a convolution whose small channel counts
            and kernel windows leave them partly idle (Graphcore, "Memory and Performance
            Optimisation on the IPU", section 2.2, AMP units). A step's arithmetic time is
            ``matmul FLOPs / matmul_efficiency + other FLOPs / compute_efficiency`` over the
            peak: each class of operation at its own sustained rate. Prior: as
            ``compute_efficiency``.
        ipu_link_latency: seconds per ring step over IPU-Links (send, sync, receive of one
            fragment), the alpha of the alpha-beta model inside an IPU-Link domain. Prior:
            microseconds (GCL figures are UNCONFIRMED).
        gw_link_latency: seconds per ring step over GW-Links between Pods (through the
            gateways), the alpha across Pods. Prior: tens of microseconds to milliseconds.
            The fit lands near a millisecond, far above a wire latency: it absorbs whatever
            a cross-Pod step costs beyond bandwidth (gateway synchronisation of the Pods),
            and only POD128 and POD256 constrain it, so predictions for many more Pods, where
            the ring's 2(P-1) steps dominate, are extrapolations.
        host_sync_seconds: fixed cost per step of the host synchronisation that ends a step
            (the IPUs wait for all hosts, and the host reads back results). Prior:
            0.1-1 ms per step.
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
        multi_ipu_sync_seconds: fixed cost of the host call that ends a step when a replica
            spans several IPUs (``ipus_per_replica`` > 1: a pipelined or sharded model), on
            top of ``host_sync_seconds``; paid once per call, so ``device_iterations``
            weight updates per call share it. Graphcore's multi-IPU trainers return to their
            host loop after every call, which prepares the next call's arrays, reads the
            outputs and writes the step's optimiser values to every IPU of the replica
            (PopART BERT's ``bert.py`` with ``batches_per_step`` 1 and
            ``updateOptimizerFromHost``: mlcommons/training_results_v2.0,
            ``Graphcore/benchmarks/bert/implementations/popart``). Fitted on the BERT-Large
            rows, where it is about a tenth of a second at every scale, on the Mk2 and the
            faster Bow IPU alike, with or without offloaded optimiser state; the
            single-IPU ResNet-50 rows never pay it. What the rows support, not a measured
            mechanism: they cannot tell a cost per call from one per weight update (each of
            their calls is one update), and the ResNeXt and EfficientNet rows, which run 104
            updates per call, would pay a per-update cost 104 times. Prior: 0.
        family_override: the calibrated family whose whole-program values replaced the
            structural ones (``load_parameters(family=...)``); empty: none. Not fitted.
        refitted_from: the file of measured runs ``--calibrate-from`` refitted these values
            to (a refitted calibration file's ``calibrate_from``); empty: none. Not fitted.
        source_file: the calibration file these values were read from, whose rows and band
            a prediction's uncertainty then comes from too; empty: the packaged one.
    """

    compute_efficiency: float = 0.2
    ipu_link_latency: float = 5e-6
    gw_link_latency: float = 1e-4
    host_sync_seconds: float = 3e-4
    compute_set_seconds: float = 1e-6
    matmul_efficiency: float = 0.2
    multi_ipu_sync_seconds: float = 0.0
    family_override: str = ""
    refitted_from: str = ""
    source_file: str = ""

    def __post_init__(self) -> None:
        for name in ("compute_efficiency", "matmul_efficiency"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(
                    f"`{name}` must be in (0, 1], got {value}: it is a fraction of peak FLOP/s."
                )
        for name in (
            "ipu_link_latency",
            "gw_link_latency",
            "host_sync_seconds",
            "compute_set_seconds",
            "multi_ipu_sync_seconds",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"`{name}` must be >= 0 seconds, got {getattr(self, name)}.")

    def to_json(self) -> dict[str, float]:
        """The fitted parameters as a JSON-ready dict (the override's name left out)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k in FITTED_PARAMETERS}

    @property
    def parameter_set(self) -> str:
        """The parameter set in words: the structural one (refitted to measured runs, if it
        was), or the family override."""
        if self.family_override:
            return f"{self.family_override} family override (--calibration-family)"
        if self.refitted_from:
            return (
                "structural, refitted to the measured runs of "
                f"{pathlib.Path(self.refitted_from).name} (--calibrate-from)"
            )
        return "structural (every term weighed by the program's structure)"


FITTED_PARAMETERS = tuple(
    f.name
    for f in dataclasses.fields(ModelParameters)
    if f.name not in ("family_override", "refitted_from", "source_file")
)


def load_parameters(path: str | pathlib.Path | None = None, *, family: str = "") -> ModelParameters:
    """The fitted parameters from ``path`` (default: the packaged calibration.json).

    Every fit's parameters together: the shared fit's and each family fit's own terms. A
    ``family`` (``--calibration-family``) replaces them with that fit's whole-program values
    (``family_names`` lists them). Falls back to the priors of ``ModelParameters`` when no
    calibration file exists, so a fresh checkout still runs before anyone has calibrated.

    Raises:
        UnknownFamilyError: ``family`` names no fit of the file, listing those there are.
    """
    file = calibration_file(path)
    data = json.loads(file.read_text()) if file.exists() else {}
    # Any: every key is a float field, which ``**`` cannot tell a type checker.
    values: dict[str, Any] = _floats(data.get("parameters", {}))
    for record in data.get("families", {}).values():
        values.update(_floats(record.get("parameters", {})))
    refitted_from = str(data.get("calibrate_from", {}).get("file", ""))
    source = "" if path is None else str(path)
    parameters = ModelParameters(**values, refitted_from=refitted_from, source_file=source)
    if family:
        name = check_family(family, path)
        values.update(override_values(data, name, values))
        parameters = dataclasses.replace(
            ModelParameters(**values, source_file=source), family_override=name
        )
    return parameters


def _floats(record: dict) -> dict[str, float]:
    """The fitted parameters of a file's ``record``, as floats (other keys left out)."""
    return {k: float(v) for k, v in record.items() if k in FITTED_PARAMETERS}


def family_names(path: str | pathlib.Path | None = None) -> tuple[str, ...]:
    """The parameter sets ``--calibration-family`` takes: the shared fit's and each family
    fit's of ``path`` (default: the packaged calibration.json)."""
    file = calibration_file(path)
    data = json.loads(file.read_text()) if file.exists() else {}
    return (SHARED_FAMILY, *data.get("families", {}))


def check_family(family: str, path: str | pathlib.Path | None = None) -> str:
    """``family`` as the file spells it (case and ``_``/``-`` ignored).

    Raises:
        UnknownFamilyError: one line naming ``family`` and the valid names.
    """
    names = family_names(path)
    key = family.lower().replace("_", "-")
    for name in names:
        if name.lower().replace("_", "-") == key:
            return name
    raise UnknownFamilyError(
        f"calibration family {family!r} (--calibration-family, Options.calibration_family) "
        f"is not a calibrated family: use one of "
        f"{', '.join(names)}, or leave it out to let the program's structure decide."
    )


def override_values(data: dict, family: str, values: dict[str, float]) -> dict[str, float]:
    """The whole-program values ``family`` stands for: its record's ``override`` (every FLOP
    at its efficiency, its fixed cost per call as host synchronisation of any replica), or,
    for the shared fit, every FLOP at its compute efficiency and no multi-IPU term."""
    if family == SHARED_FAMILY:
        efficiency = values.get("compute_efficiency", ModelParameters.compute_efficiency)
        return {"matmul_efficiency": efficiency, "multi_ipu_sync_seconds": 0.0}
    return _floats(data["families"][family].get("override", {}))


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
