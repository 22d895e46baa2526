"""How long a lost host takes to end a ``poprun-emu --real-hosts`` job, and what is said.

Two hosts made of network namespaces (``namespace_hosts.py``: a bridge, veth pairs, an sshd
and a host name each; needs root), 4 instances of tests/launch/host_program.py, 2 on each,
``--collective-timeout 5``. For each fault, ``--repeats`` jobs; the seconds run from the
fault to the launcher's exit (for the faults at start, from the launch). Prints one JSON
line per run, then a Markdown table (median, min, max) with the launcher's line about the host.

Usage::

    sudo python benchmarks/host_faults.py [--repeats 3] [--cases link,kill,...]

``POPDIST_EMU_MPIEXEC`` picks another MPI (e.g. Open MPI's ``mpiexec``), as for the launcher.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import namespace_hosts  # this folder's, shared with the launcher's tests
from results_file import write_results

from contract import ENV_MPIEXEC

TIMEOUT_S = 5
DESCRIPTION = {
    "link": "host 2's link taken down mid-run",
    "kill": "every process of host 2 killed (SIGKILL) mid-run",
    "start-link": "host 2's link down before the start",
    "start-sshd": "host 2's sshd stopped (SIGSTOP) before the start",
}


def run_case(hosts: namespace_hosts.Hosts, case: str) -> dict:
    """One job with the fault ``case``: seconds from the fault to the launcher's exit."""
    listener = hosts.daemons[1].pid
    with tempfile.TemporaryDirectory(prefix="host-faults-") as marks:
        try:
            if case == "start-link":
                namespace_hosts.ip("link", "set", hosts.link[1], "down")
            elif case == "start-sshd":
                os.kill(listener, signal.SIGSTOP)
            job = namespace_hosts.start_job(hosts, marks, 100_000, TIMEOUT_S, subprocess.DEVNULL)
            fault = time.monotonic()
            if not case.startswith("start"):
                while len([n for n in os.listdir(marks) if n.startswith("running-")]) < 4:
                    if job.poll() is not None:
                        raise RuntimeError(f"the job ended before the fault: {job.stderr}")
                    time.sleep(0.05)
                if case == "link":
                    namespace_hosts.ip("link", "set", hosts.link[1], "down")
                else:
                    hosts.kill_all(1)
                fault = time.monotonic()
            _, err = job.communicate(timeout=120)
            took = time.monotonic() - fault
        finally:
            namespace_hosts.ip("link", "set", hosts.link[1], "up")
            os.kill(listener, signal.SIGCONT)
    said = next((line for line in err.splitlines() if "host 10." in line), "")
    return {"case": case, "exit_code": job.returncode, "seconds": round(took, 2), "said": said}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(DESCRIPTION))
    args = parser.parse_args()
    cases = args.cases.split(",")
    unknown = sorted(set(cases) - set(DESCRIPTION))
    if unknown or args.repeats < 1:
        parser.error(f"--cases {unknown} unknown (know {', '.join(DESCRIPTION)}) or --repeats < 1")
    rows = []
    with (
        tempfile.TemporaryDirectory() as directory,
        namespace_hosts.two_hosts(Path(directory)) as hosts,
    ):
        for case in cases:
            for _ in range(args.repeats):
                row = run_case(hosts, case)
                print(json.dumps(row), flush=True)
                rows.append(row)
                time.sleep(4)  # sshd drops the dead sessions (ClientAliveInterval 1, count 3)
    mpi = os.environ.get(ENV_MPIEXEC) or "the mpich wheel's mpiexec"
    table = []
    for case in cases:
        mine = [r for r in rows if r["case"] == case]
        s = [r["seconds"] for r in mine]
        table.append(
            {
                "fault": DESCRIPTION[case],
                "exit code": ",".join(sorted({str(r["exit_code"]) for r in mine})),
                "seconds to end the job: median": round(statistics.median(s), 2),
                "min": round(min(s), 2),
                "max": round(max(s), 2),
                "the launcher says": mine[-1]["said"].replace("poprun-emu: ", ""),
            }
        )
    write_results("host_faults", {"mpi": mpi, "faults": table})
    print(f"\nMPI: {mpi}\n")
    print("| " + " | ".join(table[0]) + " |" if table else "")
    print("|---|---|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(str(v) for v in row.values()) + " |")


if __name__ == "__main__":
    main()
