"""A small gcl program that fails as told: the fault-injection tests and benchmarks/faults.py.

``poprun-emu --num-replicas 2 --num-instances 2 fault_program.py CASE OUT_DIR``: instance 1
(the victim) fails as CASE says; every instance first records its pid and the shared-memory
segments it maps in ``OUT_DIR/instance-<i>.json``, and the victim records the wall-clock time
of its fault in ``OUT_DIR/fault`` just before it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time

import numpy as np

from contract import write_atomically

VICTIM = 1
CASES = (
    "early",
    "before",
    "during",
    "inside",
    "after",
    "exit",
    "exit3",
    "extra",
    "kill",
    "stop",
    "stopboot",
    "sleep",
    "spin",
    "loader",
)


def main(case: str, out: str) -> None:
    if case == "early" and os.environ["POPDIST_EMU_INSTANCE_INDEX"] == str(VICTIM):
        # An empty data shard: it returns before MPI is initialised, so its peer waits in
        # MPI_Init (which holds the interpreter) until the launcher ends the job.
        with open(os.path.join(out, "fault"), "w") as f:
            f.write(repr(time.time()))
        sys.exit(0)
    from mpi4py import MPI

    import gcl

    rank = MPI.COMM_WORLD.Get_rank()
    with open("/proc/self/maps") as f:
        segments = sorted({line.split()[-1] for line in f if "/dev/shm/" in line})
    record = json.dumps({"pid": os.getpid(), "segments": segments})
    write_atomically(os.path.join(out, f"instance-{rank}.json"), record)

    def fault() -> None:
        with open(os.path.join(out, "fault"), "w") as f:
            f.write(repr(time.time()))

    def collective() -> None:
        gcl.all_reduce([np.ones(4, np.float32)])

    victim = rank == VICTIM
    if case == "before" and victim:
        # Wait (bounded, without MPI) until the peer has written its record: the test reads
        # both, and a fault this early could otherwise end the peer before it writes.
        peer = os.path.join(out, "instance-0.json")
        deadline = time.monotonic() + 60
        while not os.path.exists(peer) and time.monotonic() < deadline:
            time.sleep(0.05)
        fault()
        raise RuntimeError("injected fault before the first collective")
    collective()
    if victim and case == "during":
        fault()
        raise RuntimeError("injected fault between collectives")
    if victim and case == "exit":
        fault()
        sys.exit(0)
    if victim and case == "exit3":
        fault()
        sys.exit(3)  # its peer waits in the next collective
    if victim and case == "stopboot":
        fault()
        os.kill(os.getppid(), signal.SIGSTOP)  # its bootstrap: the program itself runs on
    if victim and case in ("kill", "stop"):
        fault()
        os.kill(os.getpid(), signal.SIGKILL if case == "kill" else signal.SIGSTOP)
    if victim and case in ("sleep", "spin", "loader"):
        # Stuck in the program, never reaching the next collective its peer waits in.
        fault()
        if case == "sleep":
            time.sleep(3600)
        elif case == "spin":
            while True:
                pass
        else:  # a data loader whose worker never delivers a batch
            batches: queue.Queue = queue.Queue()
            threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
            batches.get()
    if case == "inside":
        if victim:

            def interrupt(_signum: int, _frame: object) -> None:
                fault()
                raise RuntimeError("injected fault inside a collective")

            signal.signal(signal.SIGALRM, interrupt)
            signal.setitimer(signal.ITIMER_REAL, 0.5)  # fires while waiting for instance 0
        else:
            time.sleep(5)  # keeps the victim waiting inside the collective
    collective()
    if case == "extra" and not victim:
        collective()  # the victim has returned: this one can never complete
    if case == "extra" and victim:
        fault()
    if case == "after" and victim:
        fault()
        raise RuntimeError("injected fault after the last collective")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
