"""Argument types for the examples' command lines: bad values refused in one line, at once.

Every example parses its flags with :class:`ArgumentParser` and these types before any JAX
work, so ``--micro-batch-size 0``, ``--seed 2**70`` or ``--save nodir/p.npz`` end the program
with exit code 2 and one line naming the value and the fix, instead of a traceback from
every instance after compilation (or after the whole training). JAX-free.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from contract import available_memory_bytes, output_problem

# Seeds reach jax.random.PRNGKey (a 64-bit integer) and numpy's SeedSequence (non-negative).
MAX_SEED = 2**63 - 1


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line (no usage block), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _integer(text: str) -> int:
    # ASCII digits only: int() also reads 1_6 (16), full-width and other scripts' digits.
    if not re.fullmatch(r"-?[0-9]{1,30}", text):
        shown = repr(text if len(text) <= 40 else text[:37] + "...")
        raise argparse.ArgumentTypeError(f"{shown} is not a whole number in ASCII digits")
    return int(text)


def available_host_memory() -> int:
    """Bytes this machine can still give a process: ``MemAvailable`` (``proc(5)``)."""
    return available_memory_bytes()


def refuse_unless_it_fits(prog: str, what: str, need: int, have: int, where: str, fix: str) -> None:
    """Ends the program with one line and exit code 2 when ``need`` bytes exceed ``have``.

    For sizes that cannot be compiled or fed (a batch larger than the host's memory, a
    tensor larger than an IPU's), refused before any compile instead of an abort in XLA.
    """
    if need > have:
        sys.stderr.write(
            f"{prog}: error: {what} needs {need:,} bytes, more than the {have:,} bytes of "
            f"{where}: {fix}\n"
        )
        raise SystemExit(2)


def int_at_least(low: int) -> Callable[[str], int]:
    """A whole number ``>= low``."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is below {low}: give a whole number >= {low}")
        return value

    parse.__name__ = f"int>={low}"
    return parse


positive_int = int_at_least(1)


def seed(text: str) -> int:
    """A seed in ``[0, 2**63)``: what both JAX's and numpy's generators take."""
    value = _integer(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(
            f"{text} is outside [0, 2**63): give a seed such as 0 or 1234"
        )
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive_float(text: str) -> float:
    """A finite number ``> 0`` (a learning rate, a size in seconds)."""
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number > 0: give e.g. 0.01")
    return value


def proportion(text: str) -> float:
    """An ``availableMemoryProportion``: a number in ``(0, 1]`` (PopLibs' default is 0.6)."""
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"{text} is outside (0, 1]: give the share of tile memory for temporary values, "
            "e.g. 0.6 (the default)"
        )
    return value


def per_ipu_proportions(values: Sequence[float], ipus_per_replica: int) -> float | dict[str, float]:
    """``--available-memory-proportion P [P ...]`` as ``Options`` takes it.

    One value sets every IPU of the replica; one value per IPU gives PopTorch's mapping
    ``{"IPU0": P0, "IPU1": P1, ...}`` (``Options.setAvailableMemoryProportion``), as
    Graphcore's BERT configurations list ``matmul_proportion`` per IPU (Optimum Graphcore's
    ``IPUConfig``).

    Raises:
        ValueError: neither one value nor ``ipus_per_replica`` values; the message names
            the values and the fix.
    """
    values = list(values)
    if len(values) == 1:
        return float(values[0])
    if len(values) != ipus_per_replica:
        raise ValueError(
            f"--available-memory-proportion {' '.join(f'{v:g}' for v in values)}: give one "
            f"value for every IPU, or one per IPU of the replica ({ipus_per_replica})."
        )
    return {f"IPU{i}": float(v) for i, v in enumerate(values)}


def _writable_directory(directory: str, text: str) -> None:
    if not os.path.isdir(directory):
        raise argparse.ArgumentTypeError(
            f"{text!r}: directory {directory!r} does not exist: create it first or pick "
            f"another path"
        )


def _safe(text: str, directory: bool) -> None:
    """Refuses a symlink, an unsafe directory, or one where nothing can be created (tried,
    so root is refused under /proc), as popdist_emu._files.output_problem finds."""
    problem = output_problem(text, directory)
    if problem:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {problem}: pick a path in a directory of your own that you can write"
        )


def output_file(text: str) -> str:
    """A file path to write: not a directory, inside an existing writable directory."""
    if not text or text.endswith(os.sep) or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory: give a file path")
    _writable_directory(os.path.dirname(os.path.abspath(text)), text)
    _safe(text, directory=False)
    return text


def output_directory(text: str) -> str:
    """A directory to write into: an existing writable directory, or a new one inside one."""
    if not text:
        raise argparse.ArgumentTypeError("'' is not a directory path: give one")
    full = os.path.abspath(text)
    if os.path.exists(full):
        if not os.path.isdir(full):
            raise argparse.ArgumentTypeError(f"{text!r} is a file: give a directory path")
        _writable_directory(full, text)
    else:
        _writable_directory(os.path.dirname(full), text)
    _safe(text, directory=True)
    return text


def refuse_batch_unless_it_fits(
    prog: str, what: str, shapes: Sequence, prefetch_depth: int
) -> None:
    """Ends the program (one line, exit 2) when one call's batch (``shapes``, objects with
    ``shape`` and ``dtype``) times the calls in flight (``prefetch_depth`` besides the one
    computed) exceeds the memory this host has available."""
    call = sum(math.prod(s.shape) * s.dtype.itemsize for s in shapes)
    refuse_unless_it_fits(
        prog,
        f"{what} (one call's batch x {prefetch_depth + 1} in flight)",
        call * (prefetch_depth + 1),
        available_host_memory(),
        "memory this host has available",
        "lower --gradient-accumulation, --micro-batch-size or --device-iterations.",
    )
