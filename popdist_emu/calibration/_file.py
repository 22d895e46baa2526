"""``hardware/calibration.json``, rewritten one part at a time.

The file holds the shared fit (the top level) and each family's (``families``), fitted by
different commands; writing one part keeps the other as it is. Every write replaces the file
atomically (``contract.write_atomically``), so a reader sees the old file or the new one.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
from collections.abc import Iterator

import hardware
from contract import write_atomically


def _write(path: pathlib.Path, record: dict) -> None:
    """Replaces ``path`` with ``record``, or leaves it as it was.

    Raises:
        OSError: the write failed (a full disk, no permission), naming the file, which is
            unchanged.
    """
    try:
        write_atomically(path, json.dumps(record, indent=2) + "\n")
    except OSError as error:
        raise OSError(
            error.errno, f"could not write {path} ({error.strerror}); it is unchanged"
        ) from error


def write_shared_record(record: dict, path: pathlib.Path = hardware.CALIBRATION_FILE) -> None:
    """Stores the shared fit's ``record`` in ``path``, keeping the families' fits and the
    cross-validation (``benchmarks/validate.py``'s) there."""
    if path.exists():
        stored = json.loads(path.read_text())
        record = {
            **record,
            **{k: stored[k] for k in ("families", "cross_validation") if k in stored},
        }
    _write(path, record)


def write_family_record(
    family: str, record: dict, path: pathlib.Path = hardware.CALIBRATION_FILE
) -> None:
    """Stores ``family``'s fit ``record`` in ``path``, keeping the rest of the file."""
    stored = json.loads(path.read_text())
    stored.setdefault("families", {})[family] = record
    _write(path, stored)


@contextlib.contextmanager
def trial_family_parameters(
    family: str, values: dict[str, float] | None, path: pathlib.Path = hardware.CALIBRATION_FILE
) -> Iterator[None]:
    """``path`` with ``family``'s parameters set to ``values`` (None: none, so the shared
    ones apply) while the block runs, for runs in other processes to read; the file's text
    is restored afterwards, whatever happens in the block."""
    original = path.read_text()
    record = json.loads(original)
    families = dict(record.get("families", {}))
    families.pop(family, None)
    if values is not None:
        families[family] = {"parameters": values}
    record["families"] = families
    _write(path, record)
    try:
        yield
    finally:
        write_atomically(path, original)


def write_cross_validation(record: dict, path: pathlib.Path = hardware.CALIBRATION_FILE) -> None:
    """Stores the bands of ``benchmarks/validate.py``'s cross-validation in ``path`` (its
    ``cross_validation``), which the reports' band is read from; the rest is kept."""
    stored = json.loads(path.read_text())
    stored["cross_validation"] = record
    _write(path, stored)
