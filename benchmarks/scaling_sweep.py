"""Speed of ``poprun-emu-scaling``: a ResNet-50 sweep over 8 replica counts, 16 to 65,536.

Goals (issue 12, on an idle 2-core machine): under 30 s for the whole sweep and under 0.2 s
per point after the one compile. Prints the wall time of the command, the program's compile
and the slowest point's evaluation, from ``scaling.json``. Each run starts from a cold
executable cache (a fresh ``XDG_CACHE_HOME``) unless ``--warm`` keeps the user's cache.

    python benchmarks/scaling_sweep.py [--out DIR] [--repeat N] [--warm]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import write_results

ROOT = Path(__file__).resolve().parents[1]
REPLICAS = "16,64,256,1024,4096,16384,32768,65536"


def sweep(out: Path, warm: bool) -> dict:
    script = shutil.which("poprun-emu-scaling")
    command = [script] if script else [sys.executable, "-m", "popdist_emu.scaling"]
    words = [
        "--num-replicas", REPLICAS, "--instances-per-replica", "0.5", "--weak",
        "--published", str(ROOT / "examples" / "mlperf_v1.1_resnet50.csv"),
        "--out", str(out), str(ROOT / "examples" / "resnet50.py"),
        "--micro-batch-size", "20", "--gradient-accumulation", "2",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="scaling-sweep-cache-") as cache:
        env = dict(os.environ) if warm else {**os.environ, "XDG_CACHE_HOME": cache}
        start = time.perf_counter()
        subprocess.run(
            [*command, *words], check=True, timeout=1800, stdout=subprocess.DEVNULL, env=env
        )
        wall = time.perf_counter() - start
    doc = json.loads((out / "scaling.json").read_text())
    series = doc["series"][0]
    return {
        "wall_seconds": wall,
        "compile_seconds": series["compile_seconds"],
        "max_point_seconds": doc["max_point_evaluation_seconds"],
        "points": len(series["rows"]),
        "valid_points": series["analysis"]["valid_points"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--warm", action="store_true", help="keep the user's executable cache")
    args = parser.parse_args()
    runs = []
    for i in range(args.repeat):
        out = args.out or Path(tempfile.mkdtemp(prefix="scaling-sweep-"))
        figures = sweep(out, args.warm)
        print(
            f"run {i + 1} ({'warm' if args.warm else 'cold'} cache): {figures['points']} "
            f"points ({figures['valid_points']} valid) in "
            f"{figures['wall_seconds']:.1f} s (goal 30 s); the program's compile "
            f"{figures['compile_seconds']:.1f} s; slowest point "
            f"{figures['max_point_seconds'] * 1e3:.1f} ms (goal 200 ms)",
            flush=True,
        )
        runs.append({"cache": "warm" if args.warm else "cold", **figures})
    write_results("scaling_sweep", runs)


if __name__ == "__main__":
    main()
