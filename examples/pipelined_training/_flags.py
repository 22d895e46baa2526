"""The pipelined examples' shared flags: training, placement and precision, their checks and
the ``popdist_emu.Options`` they set. A bad value ends the program in one line, exit status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import jax.numpy as jnp
import popdist

import hardware
import popdist_emu
from popdist_emu import arguments

# ``--precision``: the weights' and activations' dtype.
DTYPES = {"fp16": jnp.float16, "fp32": jnp.float32}


def refuse(program: str, message: str) -> NoReturn:
    """A bad argument: one line on standard error, exit status 2."""
    print(f"{program}: {message}", file=sys.stderr)
    raise SystemExit(2)


def layers_per_ipu(program: str, text: str | None, layers: int, ipus: int) -> list[int]:
    """``--layers-per-ipu`` as a list of ``ipus`` counts (default: as even as possible, extras
    on later IPUs); refused in one line (exit 2) unless they are non-negative and sum to
    ``layers``."""
    if text is None:
        base, extra = divmod(layers, ipus)
        return [base + (1 if i >= ipus - extra else 0) for i in range(ipus)]
    try:
        counts = [int(c) for c in text.split(",")]
    except ValueError:
        counts = []
    if len(counts) != ipus or sum(counts) != layers or min(counts, default=-1) < 0:
        default = ",".join(map(str, layers_per_ipu(program, None, layers, ipus)))
        refuse(
            program,
            f"--layers-per-ipu {text!r} must give {ipus} non-negative counts (one per IPU "
            f"holding layers) summing to the model's {layers} layers, e.g. {default}.",
        )
    return counts


def add_training_arguments(
    parser: Any, *, steps: int, learning_rate: float, proportion_help: str
) -> None:
    """The flags every pipelined example takes: accumulation, iterations, steps, the
    optimiser's learning rate, seed, recomputation, strategy, RTS, offloading, half partials
    and the matmuls' available memory proportion (one value or one per IPU)."""
    parser.add_argument(
        "--gradient-accumulation",
        type=arguments.positive_int,
        help="default: PopTorch's least, 2 x stages - 1 (1 sharded)",
    )
    parser.add_argument("--device-iterations", type=arguments.positive_int, default=1)
    parser.add_argument("--steps", type=arguments.positive_int, default=steps)
    parser.add_argument("--learning-rate", type=arguments.positive_float, default=learning_rate)
    parser.add_argument("--seed", type=arguments.seed, default=0)
    parser.add_argument("--recompute", action="store_true")
    parser.add_argument("--strategy", choices=("pipelined", "sharded"), default="pipelined")
    parser.add_argument("--replicated-tensor-sharding", action="store_true")
    parser.add_argument("--offload-optimiser", action="store_true")
    parser.add_argument(
        "--enable-half-partials",
        action="store_true",
        help="half-precision partials in the matmuls and convolutions (PopLibs' partialsType "
        "half; Graphcore's enable_half_partials, PopTorch's Precision.setPartialsType)",
    )
    parser.add_argument(
        "--available-memory-proportion",
        type=arguments.proportion,
        nargs="+",
        default=[hardware.DEFAULT_AVAILABLE_MEMORY_PROPORTION],
        metavar="P",
        help=f"PopLibs' availableMemoryProportion of the matmuls, in (0, 1]: one value for "
        f"every IPU, or one per IPU ({proportion_help})",
    )


def check_steps(parser: Any, args: Any) -> None:
    """``--steps`` must be whole calls of ``--device-iterations`` steps."""
    if args.steps % args.device_iterations:
        parser.error(
            f"--steps {args.steps} must be a multiple of --device-iterations "
            f"{args.device_iterations} (one call runs device-iterations steps)"
        )


def pipeline_options(
    program: str, args: Any, placement: Sequence[Any], **extra: Any
) -> popdist_emu.Options:
    """``popdist_emu.Options`` from the flags :func:`add_training_arguments` adds, for the
    stages of ``placement``: PopTorch's least gradient accumulation for them unless one is
    given, the memory proportions per IPU (a bad list refused in one line) and ``extra``
    options."""
    ga = args.gradient_accumulation or hardware.min_gradient_accumulation(
        len(placement), args.strategy
    )
    try:
        amp = arguments.per_ipu_proportions(
            args.available_memory_proportion, popdist.getNumIpusPerReplica()
        )
    except ValueError as error:
        refuse(program, str(error))
    cls = (
        popdist_emu.PipelinedExecution
        if args.strategy == "pipelined"
        else popdist_emu.ShardedExecution
    )
    return popdist_emu.Options(
        gradient_accumulation=ga,
        device_iterations=args.device_iterations,
        replicated_tensor_sharding=args.replicated_tensor_sharding,
        offload_optimiser=args.offload_optimiser,
        execution_strategy=cls(*placement),
        recomputation=args.recompute,
        available_memory_proportion=amp,
        partials_type="half" if args.enable_half_partials else "float",
        **extra,
    )
