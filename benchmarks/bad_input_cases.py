"""The bad inputs ``benchmarks/bad_inputs.py`` runs: one real command line each.

Each case is a command of ``poprun-emu`` or ``poprun-emu-scaling`` whose words may name
``{D}``, the case's own temporary folder, which ``make_fixtures`` fills with the files the
cases point at: a tiny program (``prog.py``, which records that it started), a FIFO nobody
writes, a bound Unix socket, a directory, configs that import themselves or each other,
symlinks to ``/dev/null`` and ``/dev/zero``, damaged CSV and JSON-lines files. Nothing of the
machine's own ``/dev`` is named except ``/dev/null`` and ``/dev/zero``, and only as inputs.

``needle`` is what the one line of the refusal must contain: the bad value (or the flag
suggested), so that a reader can tell what to change. ``expect`` is ``"refuse"`` for a bad
input and ``"in place"`` for an output that must be written without replacing the special
file it names (``kept`` is then the path that must still be that special file).

The cases follow issue 41's red-team run (numbers, layouts, special files, config cycles,
``-x``/``-genv`` names, MPI global arguments, misspelt flags, the scaling CLI's inputs).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from contract import ENV_BOOTSTRAP, ENV_INSTANCE_INDEX, ENV_NUM_TOTAL_REPLICAS

LAUNCHER = "poprun-emu"
SCALING = "poprun-emu-scaling"
PROG = "{D}/prog.py"
# The tiny program: it records that an instance started, then returns.
PROGRAM_TEXT = (
    "import os, pathlib\n"
    "started = pathlib.Path(__file__).resolve().parent / 'started'\n"
    "(started / str(os.getpid())).write_text('')\n"
)


@dataclass(frozen=True)
class Case:
    """One bad command line: its name, tool, words (``{D}`` is the case's folder), what its
    refusal must name, and whether it is refused or written in place."""

    name: str
    tool: str
    words: tuple[str, ...]
    needle: str
    expect: str = "refuse"
    kept: str = ""  # for "in place": the special file that must still be one


def _l(name: str, *words: str, needle: str) -> Case:
    """A launcher case, the tiny program last."""
    return Case(name, LAUNCHER, (*words, PROG), needle)


def _s(name: str, *words: str, needle: str) -> Case:
    """A scaling case: ``--out {D}/o`` and the tiny program after ``words``."""
    return Case(name, SCALING, (*words, "--out", "{D}/o", PROG), needle)


R2 = ("--num-replicas", "2")
R16 = ("--num-replicas", "16")
# One case a line or two, as a table reads: the formatter would give each word a line.
# fmt: off
CASES: tuple[Case, ...] = (
    # Numbers: one rule, ASCII digits, for integers and seconds alike.
    _l("replicas full-width", "--num-replicas", "\uff12", needle="\uff12"),
    _l("replicas Arabic-Indic", "--num-replicas", "\u0662", needle="\u0662"),
    _l("replicas 1_6", "--num-replicas", "1_6", needle="1_6"),
    _l("replicas negative", "--num-replicas", "-2", needle="-2"),
    _l("replicas zero", "--num-replicas", "0", needle="0"),
    _l("replicas 2.0", "--num-replicas", "2.0", needle="2.0"),
    _l("replicas nan", "--num-replicas", "nan", needle="nan"),
    _l("replicas huge", "--num-replicas", "9" * 30, needle="9" * 30),
    _l("replicas empty", "--num-replicas", "", needle="--num-replicas"),
    _l("replicas with space", "--num-replicas", " 2", needle="' 2'"),
    _l("instances zero", "--num-instances", "0", needle="0"),
    _l("instances negative", "--num-instances", "-1", needle="-1"),
    _l("ipus-per-replica 3", *R2, "--ipus-per-replica", "3", needle="3"),
    _l("ipus-per-replica 32", *R2, "--ipus-per-replica", "32", needle="32"),
    _l("timeout full-width", "--collective-timeout", "\uff11\uff10", needle="\uff11\uff10"),
    _l("timeout 1_0", "--collective-timeout", "1_0", needle="1_0"),
    _l("timeout 1e-300", "--collective-timeout", "1e-300", needle="1e-300"),
    _l("timeout 1e-9", "--collective-timeout", "1e-9", needle="1e-9"),
    _l("timeout 0", "--collective-timeout", "0", needle="'0'"),
    _l("timeout 0.5", "--collective-timeout", "0.5", needle="0.5"),
    _l("timeout negative", "--collective-timeout", "-5", needle="-5"),
    _l("timeout nan", "--collective-timeout", "nan", needle="nan"),
    _l("timeout inf", "--collective-timeout", "inf", needle="inf"),
    _l("timeout 1e3", "--collective-timeout", "1e3", needle="1e3"),
    _l("timeout over a week", "--collective-timeout", "604801", needle="604801"),
    _l("output instance 5 of 2", *R2, "--num-instances", "2", "--only-output-from-instance",
       "5", needle="5"),
    _l("output instance -1", "--only-output-from-instance", "-1", needle="-1"),
    # Layouts that cannot be.
    _l("3 replicas on 2 instances", "--num-replicas", "3", "--num-instances", "2", needle="3"),
    _l("2 replicas on 4 instances", *R2, "--num-instances", "4", needle="4"),
    _l("3 hosts for 2 instances", *R2, "--num-instances", "2", "-H", "h[0-2]", needle="3"),
    _l("host range backwards", "-H", "h[5-2]", needle="h[5-2]"),
    _l("host range huge", "-H", "h[0-99999999]", needle="h[0-99999999]"),
    _l("hosts empty", "-H", "", needle="-H"),
    _l("system unknown", "--system", "pod7", needle="pod7"),
    _l("system too small", "--num-replicas", "16", "--num-instances", "2", "--system", "pod4",
       needle="pod4"),
    _l("65536 replicas", "--num-replicas", "65536", "--num-instances", "2048",
       needle="--offline-mode"),
    _l("compute device tpu", "--compute-device", "tpu", needle="tpu"),
    _l("yes/no maybe", "--print-topology", "maybe", needle="maybe"),
    _l("version format yaml", "--version-format", "yaml", needle="yaml"),
    # Inputs: missing, special, damaged, cyclic.
    Case("program missing", LAUNCHER, ("{D}/missing.py",), "missing.py"),
    Case("program a directory", LAUNCHER, ("{D}/dir",), "dir"),
    Case("program a FIFO", LAUNCHER, ("{D}/fifo.py",), "fifo.py"),
    _l("config missing", "--import-config", "{D}/missing.json", needle="missing.json"),
    _l("config a FIFO", "--import-config", "{D}/fifo", needle="fifo"),
    _l("config a directory", "--import-config", "{D}/dir", needle="dir"),
    _l("config a socket", "--import-config", "{D}/sock", needle="sock"),
    _l("config /dev/zero", "--import-config", "/dev/zero", needle="/dev/zero"),
    _l("config /dev/null", "--import-config", "/dev/null", needle="/dev/null"),
    _l("config link to /dev/zero", "--import-config", "{D}/zero-link", needle="zero-link"),
    _l("config empty", "--import-config", "{D}/empty.json", needle="empty.json"),
    _l("config not UTF-8", "--import-config", "{D}/bin.csv", needle="bin.csv"),
    _l("config not a list", "--import-config", "{D}/dict.json", needle="dict.json"),
    _l("config over ARG_MAX", "--import-config", "{D}/big.json", needle="big.json"),
    _l("config imports itself", "--import-config", "{D}/self.json", needle="self.json"),
    _l("config cycle a->b->a", "--import-config", "{D}/a.json", needle="a.json"),
    _l("config option twice", "--import-config", "{D}/twice.json", needle="--num-replicas"),
    _l("config unknown option", "--import-config", "{D}/bogus.json", needle="--bogus"),
    _l("config given twice", "--import-config", "{D}/good.json", "--import-config",
       "{D}/good.json", needle="--import-config"),
    _l("calibrate-from a FIFO", "--calibrate-from", "{D}/fifo", needle="fifo"),
    _l("calibrate-from missing", "--calibrate-from", "{D}/no.jsonl", needle="no.jsonl"),
    _l("calibrate-from /dev/zero", "--calibrate-from", "/dev/zero", needle="/dev/zero"),
    _l("calibrate-from not JSON", "--calibrate-from", "{D}/bad.jsonl", needle="bad.jsonl"),
    _l("mpiexec missing", "--mpiexec", "{D}/no-mpiexec", needle="no-mpiexec"),
    _l("mpiexec a directory", "--mpiexec", "{D}/dir", needle="dir"),
    _l("libmpi a FIFO", "--libmpi", "{D}/fifo", needle="fifo"),
    # Outputs: special files are written in place or refused, never replaced.
    _l("export to a FIFO, no reader", "--export-config", "{D}/fifo", "--overwrite-config",
       "yes", needle="fifo"),
    _l("export to a FIFO, no overwrite", "--export-config", "{D}/fifo", needle="fifo"),
    _l("export to a directory", "--export-config", "{D}/dir", "--overwrite-config", "yes",
       needle="dir"),
    _l("export to a socket", "--export-config", "{D}/sock", "--overwrite-config", "yes",
       needle="sock"),
    _l("export to a missing folder", "--export-config", "{D}/no/c.json", needle="no/c.json"),
    Case("export to a link to /dev/null", LAUNCHER, ("--export-config", "{D}/null-link",
         "--overwrite-config", "yes", PROG), "", "in place", "{D}/null-link"),
    _l("report-dir a FIFO", "--report-dir", "{D}/fifo", needle="fifo"),
    _l("report-dir a file", "--report-dir", "{D}/empty.json", needle="empty.json"),
    _l("report-dir a symlink", "--report-dir", "{D}/dir-link", needle="dir-link"),
    _l("report-dir under /proc", "--report-dir", "/proc/popdist-emu", needle="/proc"),
    _l("cache under a file", "--executable-cache-path", "{D}/empty.json/c",
       needle="empty.json"),
    _l("logs into a FIFO", "--mpi-global-args", "--output-filename {D}/fifo", needle="fifo"),
    # -x / -genv names and the MPI's global arguments.
    _l("-x =v", "--mpi-local-args", "-x =v", needle="-x ''"),
    _l("-x 1A=2", "--mpi-local-args", "-x 1A=2", needle="1A"),
    _l("-x without a name", "--mpi-local-args", "-x", needle="-x"),
    _l("-x emulator variable", "--mpi-global-args", f"-x {ENV_BOOTSTRAP}={{}}",
       needle=ENV_BOOTSTRAP),
    _l("-x PopDist variable", "--mpi-global-args", f"-x {ENV_NUM_TOTAL_REPLICAS}=4",
       needle=ENV_NUM_TOTAL_REPLICAS),
    _l("-genv emulator variable", "--mpi-global-args", f"-genv {ENV_BOOTSTRAP} {{}}",
       needle=ENV_BOOTSTRAP),
    _l("-genvlist emulator variable", "--mpi-global-args",
       f"-genvlist A,{ENV_INSTANCE_INDEX}", needle=ENV_INSTANCE_INDEX),
    _l("mpi --bogus", *R2, "--num-instances", "2", "--mpi-global-args", "--bogus",
       needle="--bogus"),
    _l("mpi bare word", "--mpi-global-args", "stray", needle="stray"),
    _l("mpi ':'", "--mpi-global-args", ": -n 1 other", needle="':'"),
    _l("mpi -np", "--mpi-global-args", "-np 4", needle="-np"),
    _l("mpi -H", "--mpi-global-args", "-H a,b", needle="-H"),
    _l("mpi unbalanced quote", "--mpi-global-args", "--mca 'a", needle="--mca 'a"),
    # Unknown and misspelt flags: the right one suggested.
    _l("--bogus", "--bogus", needle="--bogus"),
    _l("--num-replica=4", "--num-replica=4", needle="did you mean --num-replicas"),
    _l("--ipus-per-replca", "--ipus-per-replca", "2", needle="did you mean --ipus-per-replica"),
    _l("--collective-timout", "--collective-timout", "10",
       needle="did you mean --collective-timeout"),
    _l("--offline", "--offline", needle="did you mean --offline-mode"),
    _l("-x at top level", "-x", "FOO=1", needle="-x"),
    _l("option twice", "--num-replicas", "2", "--num-replicas", "4", needle="--num-replicas"),
    Case("value missing", LAUNCHER, ("--num-replicas",), "--num-replicas needs a value"),
    Case("no program", LAUNCHER, (*R2,), "program"),
    # poprun-emu-scaling: replica lists, numbers, inputs, outputs.
    _s("scaling replicas 16,x", "--num-replicas", "16,x", needle="16,x"),
    _s("scaling replicas 1_6", "--num-replicas", "1_6", needle="1_6"),
    _s("scaling replicas full-width", "--num-replicas", "\uff11\uff16", needle="\uff11\uff16"),
    _s("scaling replicas empty", "--num-replicas", "", needle="--num-replicas"),
    _s("scaling replicas 0", "--num-replicas", "0,16", needle="0"),
    _s("scaling replicas negative", "--num-replicas", "-16", needle="-16"),
    _s("scaling replicas 16,,32", "--num-replicas", "16,,32", needle="16,,32"),
    _s("scaling timeout nan", *R16, "--timeout", "nan", needle="nan"),
    _s("scaling timeout 1e-300", *R16, "--timeout", "1e-300", needle="1e-300"),
    _s("scaling timeout 1e-9", *R16, "--timeout", "1e-9", needle="1e-9"),
    _s("scaling timeout full-width", *R16, "--timeout", "\uff11\uff10", needle="\uff11\uff10"),
    _s("scaling instances not dividing", *R16, "--num-instances", "3",
       needle="divisible by --num-instances 3"),
    _s("scaling instances per point", "--num-replicas", "16,32,64", "--num-instances", "2,4",
       needle="--num-instances has 2 values"),
    _s("scaling instances-per-replica 2", *R16, "--instances-per-replica", "2", needle="2"),
    _s("scaling instances-per-replica nan", *R16, "--instances-per-replica", "nan",
       needle="nan"),
    _s("scaling ipus-per-replica 3", *R16, "--ipus-per-replica", "3", needle="3"),
    _s("scaling global batch per point", "--num-replicas", "16,32,64", "--global-batch", "8,9",
       needle="--global-batch has 2 values"),
    _s("scaling system unknown", *R16, "--system", "pod7", needle="pod7"),
    _s("scaling published missing", *R16, "--published", "{D}/no.csv", needle="no.csv"),
    _s("scaling published a FIFO", *R16, "--published", "{D}/fifo", needle="fifo"),
    _s("scaling published a socket", *R16, "--published", "{D}/sock", needle="sock"),
    _s("scaling published a directory", *R16, "--published", "{D}/dir", needle="dir"),
    _s("scaling published /dev/zero", *R16, "--published", "/dev/zero", needle="/dev/zero"),
    _s("scaling published not UTF-8", *R16, "--published", "{D}/bin.csv", needle="bin.csv"),
    _s("scaling published negative", *R16, "--published", "{D}/negative.csv",
       needle="negative.csv"),
    _s("scaling published nan", *R16, "--published", "{D}/nan.csv", needle="nan.csv"),
    _s("scaling calibrate-from a FIFO", *R16, "--calibrate-from", "{D}/fifo", needle="fifo"),
    _s("scaling calibrate-from /dev/zero", *R16, "--calibrate-from", "/dev/zero",
       needle="/dev/zero"),
    _s("scaling calibrate-from not JSON", *R16, "--calibrate-from", "{D}/bad.jsonl",
       needle="bad.jsonl"),
    Case("scaling out a file", SCALING, (*R16, "--out", "{D}/empty.json", PROG), "empty.json"),
    Case("scaling out a FIFO", SCALING, (*R16, "--out", "{D}/fifo", PROG), "fifo"),
    _s("scaling --numreplicas", "--numreplicas", "16", needle="did you mean --num-replicas"),
    _s("scaling compare unbalanced", *R16, "--compare", "'--x", needle="'--x"),
)
# fmt: on


def make_fixtures(folder: Path) -> None:
    """The files the cases name, in ``folder`` (the case's ``{D}``)."""
    (folder / "prog.py").write_text(PROGRAM_TEXT)
    (folder / "started").mkdir()
    (folder / "tmp").mkdir()
    (folder / "dir").mkdir()
    os.mkfifo(folder / "fifo")
    os.mkfifo(folder / "fifo.py")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(folder / "sock"))  # the socket file stays after the close
    (folder / "null-link").symlink_to("/dev/null")
    (folder / "zero-link").symlink_to("/dev/zero")
    (folder / "dir-link").symlink_to(folder / "dir")
    (folder / "empty.json").write_text("")
    (folder / "bin.csv").write_bytes(b"replicas,throughput,label\n\xff\xfe,1,x\n")
    (folder / "dict.json").write_text('{"--num-replicas": 2}\n')
    (folder / "big.json").write_text("[" + " " * (os.sysconf("SC_ARG_MAX") + 1) + "]")
    for name, words in {
        "self": [f"--import-config={folder / 'self.json'}"],
        "a": [f"--import-config={folder / 'b.json'}"],
        "b": [f"--import-config={folder / 'a.json'}"],
        "twice": ["--num-replicas=2", "--num-replicas=4"],
        "bogus": ["--bogus"],
        "good": ["--num-replicas=1"],
    }.items():
        (folder / f"{name}.json").write_text(json.dumps(words))
    (folder / "negative.csv").write_text("replicas,throughput,label\n-16,100,x\n")
    (folder / "nan.csv").write_text("replicas,throughput,label\n16,nan,x\n")
    (folder / "bad.jsonl").write_text("{not json\n")
