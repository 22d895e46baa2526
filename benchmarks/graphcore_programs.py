"""Runs Graphcore's public PopTorch programs, unchanged, under ``poprun-emu``.

Their code stays in the user's checkout of graphcore/examples (it is not ours to copy); this
script runs it from there. Only the data set and sizes differ from Graphcore's runs: the
programs ask torchvision for MNIST or Fashion-MNIST with ``download=True`` under
``~/.torch/datasets``, and nothing may be downloaded here, so each run gets a HOME of its own
in which those files already exist, made from the handwritten digits that ship with
scikit-learn (1,797 8x8 images, scaled to 28x28, written in MNIST's IDX format: train and
test split 80/20); the size arguments fit a step to that smaller set. Each program runs in a
directory of its own (they write checkpoints and plots to the working directory). Modes:
``functional`` trains and tests, ``offline`` compiles and simulates the step
(``--offline-mode``; with ``--offline-representative`` where the row has several instances:
they are symmetric, so one compiles for all instead of each on this machine's cores),
``scaling`` sweeps the program's replicas 1, 2, 4 and 8 with
``poprun-emu-scaling``.

Graphcore's applications run from the same checkout: the vision ones (``resnet50``,
``efficientnet``, ``vit``: ``benchmarks/graphcore_vision.py``) functional on 1 and 2 host
instances with their losses compared, offline at a published row's configuration; the NLP
ones (``bert``, ``gpt2``: ``benchmarks/graphcore_nlp.py``) one run per layout, showing their
losses and, offline, the simulated throughput beside the published one. Every program runs
with the interpreter ``--python`` names (by default this one): a virtual environment with the
applications' requirements.

Prints one JSON line per run (program, mode, exit code, seconds, what it shows: the test
accuracy the program prints, or offline the simulated step; the last lines of its stderr)
and then a Markdown table, and writes the runs to ``benchmarks/results/graphcore_programs.json``
(the rows of programs not run this time are kept).

Usage::

    pip install -e ".[poptorch]" "torchvision>=0.27,<0.28"
    python benchmarks/graphcore_programs.py --examples PATH/TO/graphcore/examples \\
        [--programs pipelining,mnist,basics,resnet50,efficientnet,vit,bert,gpt2]
        [--modes functional,offline,scaling] [--timeout 1200] [--python VENV/bin/python]

References:
    graphcore/examples (github.com/graphcore/examples): tutorials/tutorials/pytorch/pipelining,
    tutorials/simple_applications/pytorch/mnist, tutorials/tutorials/pytorch/basics,
    vision/cnns/pytorch, vision/vit/pytorch, nlp/bert/pytorch, nlp/gpt2/pytorch.
    LeCun et al., "The MNIST database": the IDX file format (magic 2051 for images, 2049 for
    labels, big-endian sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import calibration_set
import numpy as np
import row_features
from graphcore_nlp import (
    APPLICATIONS,
    Layout,
    figures,
    layouts,
    published_figures,
    simulated_throughput,
)
from graphcore_vision import VISION_PROGRAMS, same_losses
from published_rows import ExampleRow
from results_file import results_dir, write_results
from sklearn.datasets import load_digits

from contract import ENV_SCALING_REQUEST, write_request


class GraphcoreProgram(NamedTuple):
    """One program of graphcore/examples and how it is run here."""

    path: str  # inside the checkout
    dataset: str | None  # torchvision's folder name (MNIST, FashionMNIST); None: generated
    poprun: tuple[str, ...]  # the launcher's options
    args: tuple[str, ...]  # the program's own: sizes only
    copy: tuple[str, ...] = ()  # files beside it the program opens by relative path
    instances: tuple[int, ...] = (1,)  # functional: one run per --num-instances
    offline_poprun: tuple[str, ...] | None = None  # offline: a published row's (None: poprun)
    offline_args: tuple[str, ...] | None = None  # offline: the row's arguments (None: args)
    loss: str | None = None  # the program's own regular expression for its loss lines
    # Flags whose value the program multiplies by its local replicas (its data set's size):
    # multiplied by the instances here, so every layout trains on the same samples.
    per_instance: tuple[str, ...] = ()
    published: str | None = None  # the published row whose configuration the offline run is
    # Why the losses of two layouts are not compared (a program that leaves PyTorch's seed
    # unset draws other weights and data in every process); empty: compared. The same field
    # as the applications' ``graphcore_nlp.Application.uncompared``.
    uncompared: str = ""


PROGRAMS = {
    # The pipelining tutorial: 4 blocks on 4 IPUs, pipelined (the tutorial's own command).
    "pipelining": GraphcoreProgram(
        "tutorials/tutorials/pytorch/pipelining/mnist_pipeline.py",
        "MNIST",
        ("--num-replicas", "1", "--ipus-per-replica", "4"),
        tuple(
            [
                "--epochs",
                "1",
                "--batch-size",
                "4",
                "--device-iterations",
                "2",
                "--gradient-accumulation",
                "8",
                "--test-batch-size",
                "8",
            ]
        ),
    ),
    # The simple MNIST application: one IPU, deviceIterations 50, OutputMode.All.
    "mnist": GraphcoreProgram(
        "tutorials/simple_applications/pytorch/mnist/mnist_poptorch_code_only.py",
        "MNIST",
        ("--num-replicas", "1"),
        ("--epochs", "2"),
    ),
    # The PyTorch basics tutorial: Fashion-MNIST's file names, SGD with momentum, inference.
    "basics": GraphcoreProgram(
        "tutorials/tutorials/pytorch/basics/walkthrough_code_only.py",
        "FashionMNIST",
        ("--num-replicas", "1"),
        (),
        ("images",),
    ),
    **{name: GraphcoreProgram(**fields) for name, fields in VISION_PROGRAMS.items()},
}
MODES = ("functional", "offline", "scaling")
SCALING_REPLICAS = "1,2,4,8"  # poprun-emu-scaling's sweep of a program's --num-replicas


def _idx(array: np.ndarray, magic: int) -> bytes:
    dims = np.array(array.shape, dtype=">u4").tobytes()
    return np.array([magic], dtype=">u4").tobytes() + dims + array.astype(np.uint8).tobytes()


def write_digits_as_mnist(raw: Path) -> dict[str, int]:
    """The shipped digits as MNIST's four IDX files in ``raw`` (torchvision's raw folder)."""
    digits = load_digits()
    images = np.kron(digits.images, np.ones((3, 3)))  # 8x8 -> 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2))) * (255.0 / 16.0)  # 28x28, 0..255
    order = np.random.default_rng(0).permutation(len(images))
    cut = int(0.8 * len(images))
    raw.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for prefix, part in (("train", order[:cut]), ("t10k", order[cut:])):
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(_idx(np.rint(images[part]), 2051))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(_idx(digits.target[part], 2049))
        sizes[prefix] = len(part)
    return sizes


def _launcher(mode: str, python: str = sys.executable) -> list[str]:
    # ``python``'s launcher: a program runs with the launcher's Python, which must have the
    # program's requirements (``--python``, by default the one running this script).
    if mode == "scaling":
        return [python, "-m", "popdist_emu.scaling"]
    return [python, "-m", "launch"]


def _launch_options(program: GraphcoreProgram, mode: str, instances: int = 1) -> list[str]:
    """The program's launcher options for ``mode`` (scaling: its replicas swept; functional
    on ``instances`` host instances; offline: the published row's, where it has one)."""
    words = list(program.poprun)
    if mode == "functional" and instances != 1:
        words += ["--num-instances", str(instances)]
    if mode == "offline":
        words = [*(program.offline_poprun or program.poprun), "--offline-mode"]
        if "--num-instances" in words:  # symmetric instances: one compiles for all
            words.append("--offline-representative")
    if mode == "scaling":
        words[words.index("--num-replicas") + 1] = SCALING_REPLICAS
        words += ["--out", "scaling"]
    return words


def _scaled(words: tuple[str, ...], program: GraphcoreProgram, instances: int) -> list[str]:
    """``words`` with the values of ``program.per_instance``'s flags times ``instances``."""
    out = list(words)
    for i, word in enumerate(out[:-1]):
        if word in program.per_instance:
            out[i + 1] = str(int(out[i + 1]) * instances)
    return out


def _probing(mode: str, key: str | None, folder: Path) -> tuple[dict[str, str], Callable[[], dict]]:
    """For an offline run of published row ``key``'s configuration: the environment that asks
    the program's simulation for one probe of each fitted term at the row's layout
    (``row_features.probe_sweep``, the request the validation's rows are answered by), and
    what reads the step's features from the answer, for ``validate.py`` to set beside the
    example's term by term (nothing for another run, or a run that did not answer)."""
    if mode != "offline" or key is None:
        return {}, dict
    row = calibration_set.all_rows()[key]
    if not isinstance(row, ExampleRow):  # ResNet-50's rows are profiled, not launched
        raise ValueError(f"row {key} is no example row: name a row with a launch line")
    points, sweep = row_features.probe_sweep(row.launch)
    request, answer = folder / "request.json", folder / "answer.json"
    write_request(str(request), sweep, str(answer))

    def read() -> dict:
        if not answer.is_file():
            return {}
        return {"features": row_features.features_from_answer(points, answer).to_json()}

    return {ENV_SCALING_REQUEST: str(request)}, read


def shown_result(shown: list[str], errors: list[str], mode: str) -> str:
    """What a run shows, from its output lines (``shown``) and error lines: the program's
    test accuracy, offline the simulated step, for a sweep its throughput and parallel
    efficiency; a refused configuration's first line (what does not fit, and where)."""
    if mode == "scaling":
        results = [line for line in shown if "parallel efficiency of" in line]
    else:
        results = [line for line in shown if "ccuracy" in line or line.startswith("step ")]
    refused = [line[line.index("Out of memory") :] for line in errors if "Out of memory" in line]
    results = results or refused[:1]
    # Offline, the host's part too: its time per step and whether it decides the throughput.
    host = [line for line in shown if line.startswith(("host:", "HOST-BOUND"))]
    return "; ".join([*results[-1:], *(h.split(";")[0] for h in host)])


def run_program(
    examples: Path,
    name: str,
    mode: str,
    timeout: float,
    instances: int = 1,
    python: str = sys.executable,
) -> dict:
    """Runs program ``name`` once in ``mode`` with the interpreter ``python``; returns what
    the JSON line prints."""
    program = PROGRAMS[name]
    source = examples / program.path
    with tempfile.TemporaryDirectory(prefix=f"graphcore-{name}-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        if program.dataset:
            write_digits_as_mnist(home / ".torch" / "datasets" / program.dataset / "raw")
        work.mkdir()
        home.mkdir(exist_ok=True)
        for item in program.copy:
            if (source.parent / item).is_dir():
                shutil.copytree(source.parent / item, work / item)
            else:
                shutil.copy2(source.parent / item, work / item)
        launcher = _launcher(mode, python)
        words = program.offline_args if mode == "offline" and program.offline_args else None
        command = [
            *launcher,
            *_launch_options(program, mode, instances),
            str(source),
            *(words if words is not None else _scaled(program.args, program, instances)),
        ]
        probes, probed = _probing(mode, program.published, Path(tmp))
        env = {**os.environ, "HOME": str(home), **probes}
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout
            )
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as error:
            code, out, err = None, str(error.stdout or ""), f"timed out after {timeout:g} s"
        seconds = time.perf_counter() - start
        features = probed()
    lines = [line for line in err.splitlines() if line.strip() and "\r" not in line]
    shown = [line.split(">:", 1)[-1].strip() for line in out.splitlines()]
    losses = [float(v) for v in re.findall(program.loss, out)] if program.loss else []
    simulated = simulated_throughput(out) if mode == "offline" else None
    compared = published_figures(simulated, program.published) if simulated is not None else {}
    return {
        "program": name,
        "path": program.path,
        "mode": mode,
        "instances": instances,
        "losses": losses,
        "command": " ".join(
            ["poprun-emu-scaling" if mode == "scaling" else "poprun-emu", *command[len(launcher) :]]
        ).replace(str(examples) + "/", ""),  # the program's path in graphcore/examples
        "exit_code": code,
        "seconds": round(seconds, 1),
        "result": shown_result(shown, lines, mode),
        **compared,
        **features,
        "last_lines": lines[-6:],
    }


def run_application(
    examples: Path, name: str, mode: str, layout: Layout, python: str, timeout: float
) -> dict:
    """Runs Graphcore application ``name`` once in ``layout`` (a directory of its own: the
    programs write checkpoints there); returns what the JSON line prints."""
    source = examples / APPLICATIONS[name].path
    command = [python, "-m", "launch", *layout.poprun, str(source), *layout.args]
    app = APPLICATIONS[name]
    with tempfile.TemporaryDirectory(prefix=f"graphcore-{name}-") as work:
        probes, probed = _probing(mode, app.published, Path(work))
        if mode == "functional" and app.data:  # the program's input files, by its Python
            script, folder = app.data
            data = [python, str(Path(__file__).with_name(script)), str(Path(work) / folder)]
            subprocess.run(data, check=True, capture_output=True, timeout=timeout)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                command,
                cwd=work,
                env={**os.environ, **probes},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as error:
            code, out, err = None, str(error.stdout or ""), f"timed out after {timeout:g} s"
        seconds = time.perf_counter() - start
        features = probed()
    lines = [line for line in err.splitlines() if line.strip() and "\r" not in line]
    shown = figures(name, mode, out, err)
    return {
        "program": name,
        "path": APPLICATIONS[name].path,
        "mode": mode,
        "layout": layout.name,
        "command": " ".join(["poprun-emu", *command[3:]]).replace(str(examples) + "/", ""),
        "exit_code": code,
        "seconds": round(seconds, 1),
        **shown,
        "result": ", ".join(f"{k} {v}" for k, v in shown.items() if k != "losses"),
        **features,
        "last_lines": lines[-6:],
    }


# The options whose values are paths of the machine that ran the benchmark, and what the
# results file shows instead (the usage line's words): the file is committed.
MACHINE_PATHS = {"--examples": "PATH/TO/graphcore/examples", "--python": "VENV/bin/python"}


def portable_command(argv: list[str]) -> list[str]:
    """``argv`` with the values of ``MACHINE_PATHS``'s options replaced by their words."""
    out = list(argv)
    for i, word in enumerate(out):
        flag = word.split("=", 1)[0]
        if flag in MACHINE_PATHS and "=" in word:
            out[i] = f"{flag}={MACHINE_PATHS[flag]}"
        elif i > 0 and out[i - 1] in MACHINE_PATHS:
            out[i] = MACHINE_PATHS[out[i - 1]]
    return out


def _write(runs: list[dict]) -> None:
    """The runs into the results file, beside the kept rows of the programs and modes not
    run now (a run of one mode keeps a program's rows of the others)."""
    path = results_dir() / "graphcore_programs.json"
    kept: list[dict] = []
    if path.is_file():
        ran = {(run["program"], run["mode"]) for run in runs}
        kept = [
            r
            for r in json.loads(path.read_text())["figures"]
            if (r["program"], r["mode"]) not in ran
        ]
    rows = [{k: v for k, v in run.items() if k != "last_lines"} for run in runs]
    # Each program's rows together, in the programs' and modes' order (a stable sort keeps
    # a program's layouts in the order they ran).
    order = [*PROGRAMS, *APPLICATIONS]
    rows = sorted(
        kept + rows,
        key=lambda r: (
            order.index(r["program"]) if r["program"] in order else len(order),
            MODES.index(r["mode"]) if r["mode"] in MODES else len(MODES),
        ),
    )
    write_results("graphcore_programs", rows, portable_command(sys.argv))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", required=True, type=Path, help="graphcore/examples")
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--python", default=sys.executable, help="the applications' Python")
    args = parser.parse_args(argv)
    known = {n: p.path for n, p in PROGRAMS.items()} | {n: a.path for n, a in APPLICATIONS.items()}
    names, modes = args.programs.split(","), args.modes.split(",")
    for value, choices, flag in ((names, known, "--programs"), (modes, MODES, "--modes")):
        unknown = [v for v in value if v not in choices]
        if unknown:
            parser.error(f"{flag}: unknown {unknown}; choose from {','.join(choices)}")
    missing = [known[n] for n in names if not (args.examples / known[n]).is_file()]
    if missing:
        parser.error(
            f"--examples {args.examples}: no {missing[0]}; give a graphcore/examples checkout"
        )
    runs: list[dict] = []
    for name in names:
        for mode in modes:
            if name in APPLICATIONS:
                for i, layout in enumerate(layouts(name, mode)):
                    run = run_application(
                        args.examples, name, mode, layout, args.python, args.timeout
                    )
                    if i > 0 and APPLICATIONS[name].uncompared:
                        run["losses_not_compared"] = APPLICATIONS[name].uncompared
                    print(json.dumps(run), flush=True)
                    runs.append(run)
                continue
            counts = PROGRAMS[name].instances if mode == "functional" else (1,)
            for instances in counts:
                run = run_program(args.examples, name, mode, args.timeout, instances, args.python)
                if instances != counts[0] and PROGRAMS[name].uncompared:
                    run["losses_not_compared"] = PROGRAMS[name].uncompared
                elif instances != counts[0]:  # the program seeds: the same losses?
                    run["same_losses_as_first_layout"] = same_losses(runs[-1], run)
                print(json.dumps(run), flush=True)
                runs.append(run)
    print("\n| program | mode | exit code | seconds | result |")
    print("|---|---|---|---|---|")
    for run in runs:
        print(
            f"| `{run['path']}` | {run['mode']} | {run['exit_code']} | {run['seconds']} | "
            f"{run['result'] or (run['last_lines'] or [''])[-1][:120]} |"
        )
    _write(runs)
    return 0 if all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
