"""The bad-input table: every case of ``bad_input_cases.py`` as a real command line.

The house rule is that a bad input is refused before anything runs, in one line that names
the value, with exit code 2. The tests check it case by case, in-process; this script runs
each case as the user would (``poprun-emu ...`` or ``poprun-emu-scaling ...`` in a fresh
temporary folder, with its own ``TMPDIR``) and records, for the table in
docs/reliability.md: the exit code, the seconds to the refusal, the lines on stderr and the
first of them, whether anything started (a ``poprun-emu-*`` job directory seen in the case's
``TMPDIR`` while it ran, or the tiny program recording that it ran), and whether the house
rule held. An output case that names a special file (a symlink to ``/dev/null``) must instead
end with the file still what it was. Each case has a bounded wait (``--timeout``): one that
blocks (a FIFO opened for reading, say) is recorded as a hang and its process group killed,
not waited on. This follows issue 41's red-team run of the launcher's inputs.

Usage::

    python benchmarks/bad_inputs.py [--cases NAME,NAME,...] [--timeout 30]
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bad_input_cases import CASES, LAUNCHER, Case, make_fixtures
from results_file import write_results

ROOT = Path(__file__).resolve().parents[1]
MODULES = {LAUNCHER: "launch", "poprun-emu-scaling": "popdist_emu.scaling"}
POLL_S = 0.02
JOB_PREFIX = "poprun-emu-"  # launch._cli's job directories, popdist_emu.scaling's run folder
REFIT_PREFIX = "poprun-emu-calibrate-"
FIRST_LINE_CHARS = 160


def _shown(words: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(w.replace("{D}", "$TMP") for w in words)


def command_text(case: Case) -> str:
    """The case's command as the table shows it: ``$TMP`` for its temporary folder."""
    return shlex.join((case.tool, *_shown(case.words)))


def _started(folder: Path) -> bool:
    """A job directory (or a sweep's run folder) in the case's ``TMPDIR``, or the program's
    record. The ``--calibrate-from`` refit's folder (``contract.refit_calibration``) is made
    before its file is read and starts no instance, so it does not count."""
    jobs = any(
        p.name.lstrip(".").startswith(JOB_PREFIX) and not p.name.startswith(REFIT_PREFIX)
        for p in (folder / "tmp").iterdir()
    )
    return jobs or any((folder / "started").iterdir())


def _kept(path: Path) -> bool:
    """The special file an output case names is still a symlink to a character device."""
    return path.is_symlink() and stat.S_ISCHR(path.stat().st_mode)


def run_case(case: Case, timeout_s: float) -> dict:
    """Runs ``case`` in a fresh folder; its row of the table."""
    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as name:
        folder = Path(name)
        make_fixtures(folder)
        words = [w.replace("{D}", name) for w in case.words]
        env = {**os.environ, "TMPDIR": str(folder / "tmp")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        command = [sys.executable, "-m", MODULES[case.tool], *words]
        started = time.monotonic()
        with (
            open(folder / "stderr", "w+b") as err,
            subprocess.Popen(
                command,
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,  # its own group: a hang is ended whole
            ) as proc,
        ):
            seen = False
            while proc.poll() is None and time.monotonic() - started < timeout_s:
                seen = seen or _started(folder)
                time.sleep(POLL_S)
            seconds = time.monotonic() - started
            hang = proc.poll() is None
            if hang:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            seen = seen or _started(folder)
            err.seek(0)
            stderr = err.read().decode(errors="replace").replace(name, "$TMP")
        kept = _kept(Path(case.kept.replace("{D}", name))) if case.kept else None
    lines = stderr.strip().splitlines()
    first = lines[0] if lines else ""
    if case.expect == "refuse":
        passed = not hang and proc.returncode == 2 and len(lines) == 1 and case.needle in first
    else:
        passed = not hang and proc.returncode == 0 and bool(kept)
    row: dict = {
        "case": case.name,
        "command": command_text(case),
        "exit": None if hang else proc.returncode,
        "seconds": round(seconds, 2),
        "stderr lines": len(lines),
        "first line": first[:FIRST_LINE_CHARS],
        "started": seen,
        "house rule": passed,
    }
    if kept is not None:
        row["special file kept"] = kept
    row["hang"] = hang
    row["traceback"] = "Traceback (most recent call last)" in stderr
    return row


def summary(rows: list[dict]) -> dict:
    """The counts the table's reader wants first."""
    refused = [r for r in rows if "special file kept" not in r]
    in_place = [r for r in rows if "special file kept" in r]
    return {
        "cases": len(rows),
        "bad inputs refused in one line with exit 2, naming the value": (
            f"{sum(r['house rule'] for r in refused)} of {len(refused)}"
        ),
        "refused before anything started": (
            f"{sum(not r['started'] for r in refused)} of {len(refused)}"
        ),
        "special-file outputs written in place, file kept": (
            f"{sum(r['house rule'] for r in in_place)} of {len(in_place)}"
        ),
        "hangs": sum(r["hang"] for r in rows),
        "tracebacks": sum(r["traceback"] for r in rows),
        "slowest refusal (s)": max((r["seconds"] for r in refused), default=0.0),
    }


def markdown(rows: list[dict]) -> str:
    """The rows as a Markdown table (pipes escaped)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [str(row.get(c, "")).replace("|", "\\|") for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cases", default="", help="names, comma-separated (default: all)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per case")
    args = parser.parse_args(argv)
    names = [n for n in args.cases.split(",") if n]
    unknown = sorted(set(names) - {c.name for c in CASES})
    if unknown:
        parser.error(f"no case named {', '.join(map(repr, unknown))}")
    cases = [c for c in CASES if not names or c.name in names]
    rows = []
    for case in cases:
        row = run_case(case, args.timeout)
        print(f"{'ok  ' if row['house rule'] else 'FAIL'} {row['case']}: {row['first line']}",
              flush=True)  # fmt: skip
        rows.append(row)
    figures = {**summary(rows), "rows": rows}
    words = None if argv is None else [sys.argv[0], *argv]
    write_results("bad_inputs", figures, words)
    print()
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
