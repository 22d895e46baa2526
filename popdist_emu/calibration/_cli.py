"""``python -m popdist_emu.calibration``: ``--calibrate-from``'s refit, as its own process.

Both launchers run it before the job: ``poprun-emu`` imports only ``contract`` (it starts
without JAX or SciPy) and ``poprun-emu-scaling``'s layer does not reach the fits, so the
refit (:func:`popdist_emu.calibration.refit_program`) runs here and they read its outcome:
the refitted file at ``--out``, the lines to print on stdout, or one line on stderr and
exit 2 for a bad file of measurements or a probe run that failed
(``contract.refit_calibration`` is their side).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from popdist_emu.calibration._probe import refit_program
from popdist_emu.calibration._user import MeasurementError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        print(f"python -m popdist_emu.calibration: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    """Refits to ``--calibrate-from FILE`` for ``PROGRAM``; returns the exit code."""
    parser = _Parser(prog="python -m popdist_emu.calibration", allow_abbrev=False)
    parser.add_argument("--calibrate-from", required=True, metavar="FILE")
    parser.add_argument("--system", default="", help="the job's --system")
    parser.add_argument("--out", required=True, metavar="FILE.json", help="the refitted file")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="the program and its args")
    ns = parser.parse_args(sys.argv[1:] if argv is None else argv)
    program = ns.program[1:] if ns.program[:1] == ["--"] else ns.program
    if not program:
        parser.error("no program to probe: end the options with the program and its args")
    folder = os.path.dirname(os.path.abspath(ns.out))
    try:
        file, lines = refit_program(ns.calibrate_from, program, ns.system, folder)
    except MeasurementError as error:
        print(error, file=sys.stderr)
        return 2
    if os.path.abspath(file) != os.path.abspath(ns.out):
        shutil.move(file, ns.out)
    for line in lines:
        print(line, flush=True)
    return 0
