"""Start-up of a job as a user sees it: seconds from launch to the first step, and offline.

Measures, from the moment ``poprun-emu`` is started:

- the main job, ``poprun-emu --num-replicas 16 --num-instances 4 examples/train.py``: seconds
  until instance 0 prints its first step (``step 1/100 ...``), with a cold executable cache
  (a fresh ``--executable-cache-path``, so every program is compiled) and a warm one (the
  same directory again, so every program is loaded from JAX's persistent cache);
- ``poprun-emu --offline-mode --num-replicas 65536 --num-instances 2048 examples/train.py``:
  seconds until the launcher exits, warm cache (its steady-state cost; the cold run's
  compile is reported too), and the CPU seconds of its processes, which is what its wall
  time comes to on an idle machine.

Each figure is run ``--repeats`` times; the median and the range are printed, with the load
average before the runs, since other work on the machine slows every figure. The last line
is one JSON object with all figures.

Usage::

    python benchmarks/startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from poprun_command import poprun_command
from results_file import write_results

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "examples" / "train.py"
MAIN_JOB = ("--num-replicas", "16", "--num-instances", "4", str(TRAIN))
OFFLINE_JOB = ("--offline-mode", "--num-replicas", "65536", "--num-instances", "2048", str(TRAIN))
FIRST_STEP = "step 1/"


def time_to_first_step(cache: str, timeout: float = 300.0) -> tuple[float, dict]:
    """Seconds from starting the main job until instance 0 prints its first step, and the
    job's final JSON line; the job runs to its end (so the next run starts undisturbed)."""
    command = [*poprun_command(), "--executable-cache-path", cache, *MAIN_JOB]
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
    )
    first, last = None, "{}"
    assert proc.stdout is not None
    for line in proc.stdout:
        if first is None and FIRST_STEP in line:
            first = time.perf_counter() - start
        if "<stdout>:{" in line:
            last = line[line.index("{") :]
        if time.perf_counter() - start > timeout:
            proc.kill()
            break
    if proc.wait(timeout=timeout) != 0 or first is None:
        raise RuntimeError(f"{' '.join(command)} failed or printed no first step")
    return first, json.loads(last)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def offline_seconds(cache: str, timeout: float = 300.0) -> tuple[float, float]:
    """Wall seconds of the offline 65,536-replica job, launch to exit, and the CPU seconds
    of all its processes (what the wall time approaches on an idle machine: the job is one
    single-threaded process at a time)."""
    command = [*poprun_command(), "--executable-cache-path", cache, *OFFLINE_JOB]
    cpu = _children_cpu()
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=timeout, cwd=ROOT)
    return time.perf_counter() - start, _children_cpu() - cpu


def _summary(values: list[float]) -> dict:
    return {
        "median_s": round(statistics.median(values), 2),
        "min_s": round(min(values), 2),
        "max_s": round(max(values), 2),
        "runs": [round(v, 2) for v in values],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each figure")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    cold, warm, offline_cold, offline_warm, offline_cpu = [], [], [], [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="popdist-emu-cache-") as cache:
            os.chmod(cache, 0o700)
            cold.append(time_to_first_step(cache)[0])
            seconds, result = time_to_first_step(cache)
            warm.append(seconds)
        with tempfile.TemporaryDirectory(prefix="popdist-emu-cache-") as cache:
            os.chmod(cache, 0o700)
            offline_cold.append(offline_seconds(cache)[0])
            seconds, cpu = offline_seconds(cache)
            offline_warm.append(seconds)
            offline_cpu.append(cpu)
    figures = {
        "cpus": os.cpu_count(),
        "load_average_before": round(load, 2),
        "first_step_cold_cache": _summary(cold),
        "first_step_warm_cache": _summary(warm),
        "offline_65536_replicas_cold_cache": _summary(offline_cold),
        "offline_65536_replicas_warm_cache": _summary(offline_warm),
        "offline_65536_replicas_warm_cache_cpu": _summary(offline_cpu),
        "main_job_last_run": {
            k: result.get(k) for k in ("final_loss", "test_accuracy", "wall_seconds")
        },
    }
    for name, value in figures.items():
        if isinstance(value, dict) and "median_s" in value:
            print(
                f"{name}: median {value['median_s']} s (range {value['min_s']}-"
                f"{value['max_s']} s over {len(value['runs'])} runs)"
            )
    print(f"load average before the runs: {load:.2f} on {os.cpu_count()} CPUs")
    print(json.dumps(figures), flush=True)
    write_results("startup", {"load_average_before": round(load, 2), **figures})
    return figures


if __name__ == "__main__":
    main()
