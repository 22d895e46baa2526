"""Running one series of a scaling sweep: its points, the one offline run, its answers.

The series' points are checked as the launcher would check them (a layout PopRun refuses or a
system too small is answered here, without running anything); the others go to the program in
a request file (``POPDIST_EMU_SCALING_REQUEST``), run once as ``poprun-emu --offline-mode`` of
the first valid point. The wait is bounded (``--timeout``): past it the program's process
group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import hardware
from popdist_emu._files import write_atomically
from popdist_emu.sim import REQUEST_VARIABLE, system_name


def series_points(config: dict[str, Any], series: dict[str, Any]) -> list[dict[str, Any]]:
    """The points of one series; each checked as the launcher would (``result`` if invalid)."""
    points = []
    for i, r in enumerate(config["replicas"]):
        k = series["ipus_per_replica"]
        point: dict[str, Any] = {
            "replicas": r,
            "instances": series["instances"][i],
            "ipus_per_replica": k,
            "global_batch": config["global_batch"][i] if config["global_batch"] else None,
        }
        try:
            hardware.ReplicaLayout(
                num_replicas=r, num_instances=point["instances"], ipus_per_replica=k
            )
            point["system"] = system_name(series["ipu"], series["system"], r * k)
            hardware.select_system(point["system"], r * k)
        except (ValueError, hardware.SystemSelectionError) as error:
            point.setdefault("system", series["system"])
            point["result"] = {"status": "invalid", "reason": str(error).splitlines()[0]}
        points.append(point)
    return points


def _launch_command(config: dict, series: dict, point: dict) -> list[str]:
    return [
        sys.executable, "-m", "launch", "--offline-mode", "--offline-representative",
        "--num-replicas", str(point["replicas"]),
        "--num-instances", str(point["instances"]),
        "--ipus-per-replica", str(point["ipus_per_replica"]),
        "--system", point["system"],
        config["program"], *series["program_args"],
    ]  # fmt: skip


def _last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _stop(process: subprocess.Popen) -> int:
    """Ends a program past its time: SIGTERM to its process group, SIGKILL 30 s later."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait(timeout=30)


def run_series(config: dict, series: dict, log_path: str, tick: Any = None) -> dict[str, Any]:
    """Compiles the series' program once and evaluates all its points; fills ``result``s.

    ``tick()`` is called about once a second while the program runs.
    """
    points = series_points(config, series)
    todo = [p for p in points if "result" not in p]
    info: dict[str, Any] = {
        "command": None,
        "exit_code": None,
        "compile_seconds": None,
        "error": "",
        "model": None,
    }
    if not todo:
        return {**info, "points": points}
    with tempfile.TemporaryDirectory(prefix="poprun-emu-scaling-") as tmp:
        request = os.path.join(tmp, "request.json")
        result = os.path.join(tmp, "result.json")
        fields = ("replicas", "instances", "ipus_per_replica", "system", "global_batch")
        write_atomically(
            request,
            json.dumps({"points": [{k: p[k] for k in fields} for p in todo], "result": result}),
        )
        command = _launch_command(config, series, todo[0])
        info["command"] = shlex.join(["poprun-emu", *command[3:]])
        env = {**os.environ, REQUEST_VARIABLE: request}
        start = time.perf_counter()
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            deadline = time.monotonic() + config["timeout"]
            while info["exit_code"] is None:
                try:
                    info["exit_code"] = process.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    if tick is not None:
                        tick()  # the progress bar's elapsed time moves while it compiles
                    if time.monotonic() > deadline:
                        info["exit_code"] = _stop(process)
                        info["error"] = f"the program ran past --timeout {config['timeout']:g} s"
        info["compile_seconds"] = time.perf_counter() - start
        if os.path.exists(result):
            with open(result) as f:
                answer = json.load(f)
            for point, evaluated in zip(todo, answer["points"], strict=True):
                point["result"] = evaluated
            info["model"] = {k: v for k, v in answer.items() if k != "points"}
        else:
            info["error"] = info["error"] or (
                f"the program exited with {info['exit_code']} before popdist_emu.simulate "
                f"(log {log_path}): {_last_line(log_path)}"
            )
            for point in todo:
                point["result"] = {"status": "invalid", "reason": info["error"]}
    return {**info, "points": points}
