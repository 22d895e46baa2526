"""What ``poprun-emu-scaling`` reads besides its arguments: measured points and runs.

``--published FILE.csv`` (measured throughputs shown beside the predictions) and
``--calibrate-from FILE`` (measured runs the parameters are refitted to before the sweep,
``contract.refit_calibration``, a ``python -m popdist_emu.calibration`` process); each bad
file is refused in one line.
"""

from __future__ import annotations

import contextlib
import csv
import re
from collections.abc import Iterator

import hardware
from contract import (
    FileTooLargeError,
    RefitError,
    ascii_whole,
    read_bounded,
    refit_calibration,
)
from popdist_emu.scaling._config import PublishedPoint, SweepConfig

# A published table has a line per replica count, at most one per IPU of the largest system;
# 256 bytes a line hold the two numbers and a label of a sentence. More is not such a table.
MAX_PUBLISHED_BYTES = 256 * (2 + max(s.num_ipus for s in hardware.SYSTEMS.values()))


_THROUGHPUT = re.compile(r"[0-9]{1,18}(\.[0-9]{1,18})?")


class UsageError(ValueError):
    """A bad argument: one line naming the value and the fix."""


def read_published(path: str) -> list[PublishedPoint]:
    """Measured points from a CSV with columns ``replicas``, ``throughput``, ``label``."""
    try:
        text = read_bounded(path, MAX_PUBLISHED_BYTES).decode()
    except OSError as error:
        raise UsageError(f"--published {path!r} cannot be read ({error.strerror}).") from None
    except FileTooLargeError:
        raise UsageError(
            f"--published {path!r} holds more than {MAX_PUBLISHED_BYTES} bytes, more than one "
            f"line per replica count of the largest system: name a CSV of measured points."
        ) from None
    except UnicodeDecodeError:
        raise UsageError(
            f"--published {path!r} is not UTF-8 text: name a CSV of measured points "
            "(replicas,throughput,label)."
        ) from None
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    rows = list(csv.DictReader(lines))
    points = []
    for i, row in enumerate(rows, start=2):
        replicas, throughput, label = (row.get(k) for k in ("replicas", "throughput", "label"))
        if replicas is None or throughput is None or label is None:
            raise UsageError(
                f"--published {path!r} row {i} is not replicas,throughput,label (a header line "
                "'replicas,throughput,label' then one measured point per line)."
            )
        # One rule for numbers (contract._numbers): ASCII digits, as the user typed them;
        # int() and float() also read -16, 1_6, full-width digits, nan and inf.
        whole = ascii_whole(replicas)
        if not (whole is not None and whole > 0):
            raise UsageError(
                f"--published {path!r} row {i}: replicas {replicas!r} is not a positive whole "
                "number in ASCII digits: write e.g. 16."
            )
        if not (_THROUGHPUT.fullmatch(throughput) and float(throughput) > 0):
            raise UsageError(
                f"--published {path!r} row {i}: throughput {throughput!r} is not a positive "
                "decimal in ASCII digits: write e.g. 29500 or 29500.5."
            )
        points.append(PublishedPoint(whole, float(throughput), label))
    if not points:
        raise UsageError(f"--published {path!r} has no points.")
    return points


@contextlib.contextmanager
def refitted(config: SweepConfig) -> Iterator[dict[str, str]]:
    """``--calibrate-from``: the first series' program refitted to the measured runs (the
    changed parameters printed); yields, while the sweep runs, the variable that points every
    series at the refit. The refit is bounded by ``--timeout``, as a series' run is."""
    first = config.series[0]
    program = (config.program, *first.program_args)
    with contextlib.ExitStack() as stack:
        try:
            env, lines = stack.enter_context(
                refit_calibration(
                    config.calibrate_from,
                    program,
                    first.system,
                    timeout_s=config.timeout,
                    timeout_option="--timeout",
                )
            )
        except RefitError as error:
            raise UsageError(str(error)) from None
        for line in lines:
            print(f"[poprun-emu-scaling] {line}", flush=True)
        yield env
