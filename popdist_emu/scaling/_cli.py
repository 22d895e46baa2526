"""``poprun-emu-scaling``: sweep a training program over replica counts from one compile.

    poprun-emu-scaling --num-replicas 16,64,128,256 --instances-per-replica 0.5 \\
        --strong --global-batch 3200,3840,5120,10240 \\
        --published examples/mlperf_v1.1_resnet50.csv --out rn50 \\
        examples/resnet50.py --micro-batch-size 20

Each series (the command's own arguments, then one per ``--compare "ARGS"``) runs the program
ONCE, as ``poprun-emu --offline-mode`` of its first valid point, with
``POPDIST_EMU_SCALING_REQUEST`` naming a request that lists every point; the program's
``popdist_emu.simulate`` evaluates them all from the one compiled step
(``popdist_emu.sim``). The analysis (``_analysis``, ``_table``) and the report (``_report``)
follow. Every bad argument is refused in one line with exit code 2
before anything runs; a point that PopRun would refuse, or that does not fit in memory, stays
in the report with its reason. Imports no JAX.

References:
    Graphcore PopRun user guide (``--num-replicas``, ``--num-instances``,
    ``--ipus-per-replica``, ``--offline-mode``); Memory and Performance Optimisation on the
    IPU, section 7 ("Scaling an application over multiple replicas").
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import os
import shlex
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from tqdm import tqdm

import hardware
from contract import (
    MAX_TIMEOUT_S,
    MIN_TIMEOUT_S,
    ascii_seconds,
    ascii_whole,
    ending_signals_interrupt,
    interrupt_signal,
    make_directories,
    output_problem,
)
from popdist_emu.scaling import _run
from popdist_emu.scaling._config import Series, SeriesRun, SweepConfig
from popdist_emu.scaling._inputs import UsageError, read_published, refitted
from popdist_emu.scaling._table import analyse_series, series_rows

PROG = "poprun-emu-scaling"
DEFAULT_TIMEOUT = 1800.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(message)


def _ints(text: str, flag: str) -> list[int]:
    # Every entry counts: an empty one (16,,32 or 16,) is a typo, not a point to skip.
    # ASCII digits only: int() also reads 1_6 (16), full-width and other scripts' digits.
    words = [ascii_whole(v.strip()) for v in text.split(",")]
    values = [v for v in words if v is not None]
    if len(values) != len(words):
        raise UsageError(
            f"{flag} {text!r} is not a comma-separated list of integers: e.g. {flag} 16,64"
        )
    if any(v < 1 for v in values):
        raise UsageError(f"{flag} {text!r} needs positive integers: e.g. {flag} 16,64")
    return values


def _ipus(text: str) -> int:
    value = ascii_whole(text)
    if value is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number in ASCII digits: write e.g. --ipus-per-replica 4"
        )
    return value


def check_out(out: str) -> None:
    """Refuses an ``--out`` that cannot safely become a directory: a file or a path under
    one, a symlink, an unsafe directory or one where nothing can be created (tried)."""
    path = os.path.abspath(out)
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        where = "is" if path == os.path.abspath(out) else f"is under {path!r}, which is"
        raise UsageError(f"--out {out!r} {where} a file: name a directory.")
    problem = output_problem(out, directory=True)
    if problem:
        raise UsageError(f"--out {out!r}: {problem}: name a directory of your own.")


def _series_parser() -> _Parser:
    """The options a series may set (also inside ``--compare``)."""
    parser = _Parser(prog=PROG, add_help=False, allow_abbrev=False)
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--num-instances", metavar="N[,N...]", help="instances: one count, or one per point (1)"
    )
    group.add_argument(
        "--instances-per-replica", type=float, metavar="F", help="instances = F x replicas"
    )
    parser.add_argument("--ipus-per-replica", type=_ipus, metavar="K", help="1, 2, 4, 8 or 16 (1)")
    system = parser.add_mutually_exclusive_group()
    system.add_argument("--system", metavar="NAME", help="every point on this system")
    system.add_argument(
        "--ipu", choices=("mk2", "bow"), help="smallest POD of this IPU per point (mk2)"
    )
    parser.add_argument("--label", metavar="TEXT", help="the series' name in the report")
    return parser


def _parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        parents=[_series_parser()],
        allow_abbrev=False,
        usage=f"{PROG} --num-replicas N,N,... [options] --out DIR program [args]",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument(
        "--num-replicas", required=True, metavar="N,N,...", help="the replica counts"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--strong", action="store_true", help="fixed global batch (Amdahl)")
    mode.add_argument("--weak", action="store_true", help="fixed work per replica (Gustafson)")
    parser.add_argument("--global-batch", metavar="N[,N...]", help="strong scaling's batch")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar='"ARGS"',
        help="another series: launcher options above, or words added to the program's args",
    )
    parser.add_argument(
        "--published", metavar="FILE.csv", help="measured points: replicas,throughput,label"
    )
    parser.add_argument(
        "--calibrate-from",
        metavar="FILE",
        help="JSON lines of measured runs: refit the terms they constrain first",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="where the report goes")
    parser.add_argument(
        "--timeout",
        default=f"{DEFAULT_TIMEOUT:g}",
        metavar="SECONDS",
        help="per series run of the program, and for the --calibrate-from refit (1800)",
    )
    parser.add_argument("program", help="the training program (a .py runs with this Python)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the program's arguments")
    return parser


def _per_point(values: list[int], n: int, flag: str) -> list[int]:
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise UsageError(
            f"{flag} has {len(values)} values for {n} replica counts: give one value or one "
            "per --num-replicas entry."
        )
    return values


def _series(ns: argparse.Namespace, base: Series, replicas: Sequence[int]) -> Series:
    """One series' settings: the parsed series options over ``base``."""
    series = base
    if ns.label:
        series = dataclasses.replace(series, label=ns.label)
    if ns.num_instances:
        instances = _per_point(
            _ints(ns.num_instances, "--num-instances"), len(replicas), "--num-instances"
        )
        series = dataclasses.replace(series, instances=tuple(instances))
    if ns.instances_per_replica is not None:
        f = ns.instances_per_replica
        if not 0 < f <= 1:
            raise UsageError(
                f"--instances-per-replica {f} must be in (0, 1]: e.g. 0.5 for one instance "
                "per two replicas, as the MLPerf ResNet-50 runs."
            )
        series = dataclasses.replace(
            series, instances=tuple(max(1, round(r * f)) for r in replicas)
        )
    if ns.ipus_per_replica is not None:
        if ns.ipus_per_replica not in hardware.VALID_IPUS_PER_REPLICA:
            raise UsageError(
                f"--ipus-per-replica {ns.ipus_per_replica} is not supported: use one of "
                f"{', '.join(map(str, hardware.VALID_IPUS_PER_REPLICA))}."
            )
        series = dataclasses.replace(series, ipus_per_replica=ns.ipus_per_replica)
    if ns.system:
        try:
            hardware.get_system(ns.system)
        except hardware.SystemSelectionError as error:
            raise UsageError(str(error)) from None
        series = dataclasses.replace(series, system=ns.system, ipu="")
    if ns.ipu:
        series = dataclasses.replace(series, ipu=ns.ipu, system="")
    return series


def _glued(argv: Sequence[str]) -> list[str]:
    """``--compare ARGS`` as ``--compare=ARGS``: argparse takes no value starting with ``-``.

    Only the options before the program are looked at, so the program's own words are left
    alone.
    """
    with_value = {"--num-instances", "--instances-per-replica", "--ipus-per-replica",
                  "--system", "--ipu", "--label", "--num-replicas", "--global-batch",
                  "--published", "--out", "--timeout"}  # fmt: skip
    words, out, i = list(argv), [], 0
    while i < len(words):
        word = words[i]
        if word == "--compare" and i + 1 < len(words):
            out.append(f"--compare={words[i + 1]}")
            i += 2
        elif word in with_value:
            out += words[i : i + 2]
            i += 2
        elif word.startswith("-") and word != "--":
            out.append(word)
            i += 1
        else:
            return out + words[i:]
    return out


def _refuse_unknown_options(parser: _Parser, words: Sequence[str]) -> None:
    """An option word before the program that names no option, with the closest one
    suggested: argparse would take it for the program and report the options after it as
    missing (``--numreplicas 16`` said ``required: --num-replicas, --out``)."""
    known = parser._option_string_actions
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        flag, glued = words[i].split("=", 1)[0], "=" in words[i]
        action = known.get(flag)
        if action is None:
            close = difflib.get_close_matches(flag, [f for f in known if f.startswith("--")], 1)
            hint = f": did you mean {close[0]}?" if close else "."
            raise UsageError(f"unknown option {flag}{hint} See `{PROG} --help` for the options.")
        i += 1 if glued or action.nargs == 0 else 2


def parse(argv: Sequence[str]) -> SweepConfig:
    """The whole sweep from the command line.

    Raises:
        UsageError: any bad argument (before anything runs).
    """
    parser = _parser()
    words = _glued(argv)
    _refuse_unknown_options(parser, words)
    ns = parser.parse_args(words)
    replicas = _ints(ns.num_replicas, "--num-replicas")
    if len(set(replicas)) != len(replicas):
        raise UsageError(f"--num-replicas {ns.num_replicas} repeats a replica count.")
    if ns.strong and not ns.global_batch:
        raise UsageError("--strong needs --global-batch N (or one per replica count).")
    if ns.weak and ns.global_batch:
        raise UsageError("--weak keeps the work per replica: drop --global-batch, or use --strong.")
    batches = None
    if ns.global_batch:
        batches = _per_point(
            _ints(ns.global_batch, "--global-batch"), len(replicas), "--global-batch"
        )
    timeout = ascii_seconds(ns.timeout)
    if timeout is None:
        raise UsageError(
            f"--timeout {ns.timeout!r} is not a number of seconds from {MIN_TIMEOUT_S:g} to "
            f"{MAX_TIMEOUT_S:g} in ASCII digits: write e.g. --timeout 600."
        )
    if ns.program.endswith(".py") and not os.path.isfile(ns.program):
        raise UsageError(f"program {ns.program!r} does not exist.")
    check_out(ns.out)
    baseline = Series(label="baseline", instances=(1,) * len(replicas))
    first = dataclasses.replace(_series(ns, baseline, replicas), program_args=tuple(ns.args))
    series = [first]
    for text in ns.compare:
        try:
            words = shlex.split(text)
        except ValueError as error:
            raise UsageError(f"--compare {text!r}: {error}; quote it as one shell word.") from None
        if not words:
            raise UsageError('--compare "" is empty: give program or launcher options.')
        sub, extra = _series_parser().parse_known_args(words)
        compared = _series(sub, dataclasses.replace(first, label=text), replicas)
        series.append(dataclasses.replace(compared, program_args=(*ns.args, *extra)))
    for path in [os.path.join(ns.out, "logs")] + [
        os.path.join(ns.out, "logs", f"series-{i}.log") for i in range(len(series))
    ]:
        if os.path.islink(path):
            raise UsageError(f"--out {ns.out!r}: {path!r} is a symbolic link: remove it.")
    if len({s.label for s in series}) != len(series):
        raise UsageError("two series have the same label: give --label in --compare.")
    config = SweepConfig(
        replicas=tuple(replicas),
        global_batch=tuple(batches) if batches else None,
        program=ns.program,
        series=tuple(series),
        published=tuple(read_published(ns.published)) if ns.published else (),
        out=ns.out,
        timeout=timeout,
        calibrate_from=ns.calibrate_from or "",
    )
    refusal = _run.layout_refusal(config)
    if refusal:
        raise UsageError(refusal)
    return config


def _model_parameters(run: SeriesRun) -> object:
    for evaluated in run.points:
        summary = (evaluated.result or {}).get("summary")
        if summary:
            return summary.get("model_parameters")
    return None


def sweep(config: SweepConfig, argv: Sequence[str]) -> tuple[dict[str, Any], int]:
    """Runs every series and analyses it; returns the report's document and the exit code."""
    out = config.out
    make_directories(os.path.join(out, "logs"), base=out)  # no symlinks on the way
    start = time.perf_counter()
    results: list[dict[str, Any]] = []
    parameters = None
    total = len(config.replicas) * len(config.series)
    with tqdm(total=total, unit="point", desc=PROG, file=sys.stderr, dynamic_ncols=True) as bar:
        for i, series in enumerate(config.series):
            bar.set_postfix_str(f"compiling {series.label}")
            log = os.path.join(out, "logs", f"series-{i}.log")
            ran = _run.run_series(config, series, log, tick=bar.refresh)
            parameters = parameters or _model_parameters(ran)
            rows = series_rows(series.label, ran.points)
            results.append(
                {
                    "label": series.label,
                    "program_args": list(series.program_args),
                    "system": series.system,
                    "ipu": series.ipu,
                    "ipus_per_replica": series.ipus_per_replica,
                    "command": ran.command,
                    "exit_code": ran.exit_code,
                    "compile_seconds": ran.compile_seconds,
                    "error": ran.error,
                    "model": ran.model,
                    "log": os.path.relpath(log, out),
                    "rows": rows,
                    "analysis": analyse_series(rows, config.law),
                }
            )
            bar.update(len(ran.points))
    models = [s["model"]["model"] for s in results if s["model"]]
    evaluation = [
        r["evaluation_seconds"]
        for s in results
        for r in s["rows"]
        if r["evaluation_seconds"] is not None
    ]
    doc = {
        "command": shlex.join([PROG, *argv]),
        "mode": config.mode,
        "law": config.law,
        "model": models[0] if models else "",
        "program": config.program,
        "num_points": total,
        "sweep_seconds": time.perf_counter() - start,
        "max_point_evaluation_seconds": max(evaluation) if evaluation else None,
        "published": [dataclasses.asdict(m) for m in config.published],
        "model_parameters": parameters,
        "series": results,
    }
    failed = [s for s in results if s["error"]]
    return doc, 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``poprun-emu-scaling`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = parse(argv)
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    # Imported once the arguments are good: the report draws with matplotlib, whose import
    # (0.35 s measured here) a refused argument should not wait for.
    from popdist_emu.scaling._report import narrative, write_outputs

    try:  # SIGTERM and SIGHUP end the sweep as Ctrl-C does: the running program with it
        with ending_signals_interrupt(), contextlib.ExitStack() as refit:
            if config.calibrate_from:  # the refitted file lives while the sweep runs
                try:
                    os.environ.update(refit.enter_context(refitted(config)))
                except UsageError as error:
                    print(f"{PROG}: error: {error}", file=sys.stderr)
                    return 2
            doc, code = sweep(config, argv)
    except KeyboardInterrupt as stop:
        signum = interrupt_signal(stop)
        print(f"{PROG}: interrupted; ended the running program", file=sys.stderr)
        return 128 + signum
    # The report's own time: the sweep plus writing the plots and pages.
    paths = write_outputs(doc, config.out)
    for s in doc["series"]:
        print(f"[{PROG}] {s['label']}:")
        for line in narrative(s):
            print(f"  {line}")
    print(
        f"[{PROG}] {doc['num_points']} points in {doc['sweep_seconds']:.1f} s; "
        f"report: {paths['html']}"
    )
    return code
