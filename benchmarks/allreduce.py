"""All-reduce bandwidth: the emulator's GCL rings against the MPI library's MPI_Allreduce.

Run under the launcher (one replica per instance gives the classic ring):

    poprun-emu --num-replicas 4 --num-instances 4 --only-output-from-instance 0 \
        benchmarks/allreduce.py --bytes 67108864

or plainly ``mpiexec -n 4 python benchmarks/allreduce.py --bytes 67108864``. Prints one
JSON line per implementation and size from instance 0: ``impl`` ("mpi" or a GCL method),
``instances``, ``replicas``, ``bytes`` (per replica), ``seconds`` (median over timed
iterations of the slowest instance), ``algbw_GBps``, ``busbw_GBps`` and, for GCL,
``ratio_to_mpi`` (bus bandwidth over MPI's in the same run).

References:
    NVIDIA nccl-tests, doc/PERFORMANCE.md: bus bandwidth of all-reduce is
    algbw * 2(n-1)/n, n = ranks taking part (here replicas for GCL, instances for MPI).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

import numpy as np
from mpi4py import MPI
from results_file import write_results

import gcl
import popdist_emu


def _time_interleaved(fns: dict, comm, warmup: int, iters: int) -> dict[str, float]:
    """Median seconds (slowest instance) per implementation, running them in turn within
    every iteration so that load from other processes hits all of them alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            samples[name].append(comm.allreduce(dt, op=MPI.MAX))
    return {name: statistics.median(v) for name, v in samples.items()}


def _implementations(comm, values: list[np.ndarray], methods: list[str]) -> dict:
    """name -> a callable running that all-reduce once on ``values``."""
    recv = np.empty_like(values[0])
    fns = {"mpi": lambda: comm.Allreduce(values[0], recv, op=MPI.SUM)}
    for method in methods:
        fns[method] = functools.partial(gcl.all_reduce, values, method=method)
    return fns


def _busbw(nbytes: int, seconds: float, n: int) -> tuple[float, float]:
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * (2 * (n - 1) / n if n > 1 else 1.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bytes",
        type=int,
        nargs="+",
        default=[64 << 20],
        help="message size per replica in bytes (float32), several allowed",
    )
    parser.add_argument("--method", choices=[*gcl.METHODS, "auto", "all"], default="all")
    parser.add_argument("--iters", type=int, default=9, help="timed iterations")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations")
    args = parser.parse_args(argv)

    comm = MPI.COMM_WORLD
    instances, rank = comm.Get_size(), comm.Get_rank()
    local = popdist_emu.getNumLocalReplicas()
    replicas = local * instances
    methods = list(gcl.METHODS) if args.method == "all" else [args.method]
    for nbytes in args.bytes:
        count = nbytes // 4
        rng = np.random.default_rng(rank)
        values = [rng.standard_normal(count, dtype=np.float32) for _ in range(local)]
        fns = _implementations(comm, values, methods)
        seconds = _time_interleaved(fns, comm, args.warmup, args.iters)
        alg, mpi_bus = _busbw(count * 4, seconds["mpi"], instances)
        rows = [
            dict(
                impl="mpi",
                instances=instances,
                replicas=instances,
                bytes=count * 4,
                seconds=seconds["mpi"],
                algbw_GBps=alg,
                busbw_GBps=mpi_bus,
            )
        ]
        for method in methods:
            alg, bus = _busbw(count * 4, seconds[method], replicas)
            rows.append(
                dict(
                    impl=method,
                    instances=instances,
                    replicas=replicas,
                    bytes=count * 4,
                    seconds=seconds[method],
                    algbw_GBps=alg,
                    busbw_GBps=bus,
                    ratio_to_mpi=bus / mpi_bus,
                )
            )
        if rank == 0:
            for row in rows:
                print(
                    json.dumps(
                        {k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()}
                    ),
                    flush=True,
                )
            write_results(f"allreduce-{instances}-instances", rows)


if __name__ == "__main__":
    main()
