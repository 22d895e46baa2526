"""Running one series of a scaling sweep: its points, the one offline run, its answers.

The series' points are checked as the launcher would check them (a layout PopRun refuses or a
system too small is answered here, without running anything); the others go to the program in
a request file (``POPDIST_EMU_SCALING_REQUEST``), run once as ``poprun-emu --offline-mode`` of
the first valid point. The wait is bounded (``--timeout``): past it the program's process
group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import hardware
from contract import (
    ENV_SCALING_REQUEST,
    SweepPoint,
    end_process_group,
    open_for_appending_lines,
    start_session,
    system_name,
    write_request,
)
from popdist_emu.scaling._config import EvaluatedPoint, Series, SeriesRun, SweepConfig


def series_points(config: SweepConfig, series: Series) -> list[EvaluatedPoint]:
    """The points of one series; each checked as the launcher would (a ``result`` if invalid)."""
    points = []
    for i, replicas in enumerate(config.replicas):
        point = SweepPoint(
            replicas=replicas,
            instances=series.instances[i],
            ipus_per_replica=series.ipus_per_replica,
            system=series.system,
            global_batch=config.global_batch[i] if config.global_batch else None,
        )
        try:
            point.layout()
            point = dataclasses.replace(
                point, system=system_name(series.ipu, series.system, point.num_ipus)
            )
            hardware.select_system(point.system, point.num_ipus)
        except (ValueError, hardware.SystemSelectionError) as error:
            reason = str(error).splitlines()[0]
            points.append(EvaluatedPoint(point, {"status": "invalid", "reason": reason}))
            continue
        points.append(EvaluatedPoint(point))
    return points


def layout_refusal(config: SweepConfig) -> str:
    """Why the sweep is refused when none of its points is a layout PopRun would run (every
    series, every replica count), else ``""``: a report of invalid points only would exit 0
    having run nothing (``--num-replicas 16 --num-instances 3``). A sweep with one such point
    among others keeps it in the report with its reason, as docs/scaling.md says."""
    reasons = [
        evaluated.result["reason"]
        for series in config.series
        for evaluated in series_points(config, series)
        if evaluated.result is not None
    ]
    if len(reasons) < len(config.replicas) * len(config.series):
        return ""
    return f"no point of the sweep is a layout PopRun would run: {reasons[0]}"


def _launch_command(config: SweepConfig, series: Series, point: SweepPoint) -> list[str]:
    return [
        sys.executable, "-m", "launch", "--offline-mode", "--offline-representative",
        "--num-replicas", str(point.replicas),
        "--num-instances", str(point.instances),
        "--ipus-per-replica", str(point.ipus_per_replica),
        "--system", point.system,
        config.program, *series.program_args,
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
    return end_process_group(process, grace_s=30)


def run_series(
    config: SweepConfig, series: Series, log_path: str, tick: Callable[[], object] | None = None
) -> SeriesRun:
    """Compiles the series' program once and evaluates all its points.

    ``tick()`` is called about once a second while the program runs.
    """
    points = series_points(config, series)
    todo = [p.point for p in points if p.result is None]
    if not todo:
        return SeriesRun(tuple(points))
    error = ""
    with tempfile.TemporaryDirectory(prefix="poprun-emu-scaling-") as tmp:
        request = os.path.join(tmp, "request.json")
        result = os.path.join(tmp, "result.json")
        write_request(request, todo, result)
        command = _launch_command(config, series, todo[0])
        env = {**os.environ, ENV_SCALING_REQUEST: request}
        start = time.perf_counter()
        exit_code: int | None = None
        with open_for_appending_lines(log_path) as log:  # never through a symlink
            process, release = start_session(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            deadline = time.monotonic() + config.timeout
            try:
                release()  # an ending signal that came while it started acts here
                while exit_code is None:
                    try:
                        exit_code = process.wait(timeout=1.0)
                    except subprocess.TimeoutExpired:
                        if tick is not None:
                            tick()  # the progress bar's elapsed time moves while it compiles
                        if time.monotonic() > deadline:
                            exit_code = _stop(process)
                            error = f"the program ran past --timeout {config.timeout:g} s"
            except BaseException:  # Ctrl-C or SIGTERM: the program runs in its own session
                if process.poll() is None:
                    _stop(process)
                raise
        seconds = time.perf_counter() - start
        answers: dict[SweepPoint, dict] = {}
        model = None
        if os.path.exists(result):
            with open(result) as f:
                answer = json.load(f)
            answers = dict(zip(todo, answer["points"], strict=True))
            model = {k: v for k, v in answer.items() if k != "points"}
        else:
            error = error or (
                f"the program exited with {exit_code} before popdist_emu.simulate "
                f"(log {log_path}): {_last_line(log_path)}"
            )
    failed = {"status": "invalid", "reason": error}
    evaluated = tuple(
        p if p.result is not None else EvaluatedPoint(p.point, answers.get(p.point, failed))
        for p in points
    )
    return SeriesRun(
        evaluated,
        command=shlex.join(["poprun-emu", *command[3:]]),
        exit_code=exit_code,
        compile_seconds=seconds,
        error=error,
        model=model,
    )
