"""MPI worker for the gcl tests: ``mpiexec -n N python -m mpi4py gcl_worker.py MODE OUT ...``.

NumPy only (no JAX import), so each run costs well under a second. Every rank draws the
same seeded cases; rank 0 gathers every global replica's results into one ``.npz``.

Modes:
    cases OUT NUM_REPLICAS NUM_CASES SEED: run every collective on each case.
    mismatch OUT: the last instance passes a different shape; each rank writes its error.
    hang OUT: instance 1 never enters the collective; instance 0 writes its timeout error.
    busy OUT: a broadcast of 128 MB, then every instance computes (sleeps) past the
        timeout without MPI calls, then an all-reduce; rank 0 writes the results.
    left OUT: instance 0 returns after one collective; instance 1, still counted inside that
        collective, writes whether the leaving notice reports instance 0 as gone, then again
        once it counts a second collective.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gcl_reference import draw_case

import gcl

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


def _local(values: list, local: int) -> list:
    return values[RANK * local : (RANK + 1) * local]


def run_cases(out: str, num_replicas: int, num_cases: int, seed: int) -> None:
    local = num_replicas // SIZE
    rng = np.random.default_rng(seed)
    results: dict[str, np.ndarray] = {}
    # A receive the user left open on COMM_WORLD must not swallow any gcl message: the
    # collectives talk on a private duplicate.
    marker = np.full(1, -1, np.int64)
    user_recv = COMM.Irecv(marker, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
    for c in range(num_cases):
        case = draw_case(rng, num_replicas)
        mine = _local(case["values"], local)
        kw = {"group": case["group"], "timeout": 60}
        ar = gcl.all_reduce(mine, case["op"], method=case["method"], **kw)
        rs = gcl.reduce_scatter(mine, case["op"], method=case["method"], **kw)
        ag = gcl.all_gather(rs, like=mine[0], **kw)
        bc = gcl.broadcast(mine, root=case["root"], **kw)
        for name, res in (
            ("all_reduce", ar),
            ("reduce_scatter", rs),
            ("all_gather", ag),
            ("broadcast", bc),
        ):
            for k, leaves in enumerate(res):
                for j, leaf in enumerate(leaves):
                    results[f"{c}/{name}/{RANK * local + k}/{j}"] = np.asarray(leaf)
    COMM.Barrier()  # nobody has sent the marker yet
    assert not user_recv.Test(), "a gcl message reached the user's COMM_WORLD receive"
    COMM.Barrier()
    COMM.Send(np.array([RANK], np.int64), dest=(RANK + 1) % SIZE, tag=7)
    user_recv.Wait()
    assert marker[0] == (RANK - 1) % SIZE, marker
    # An explicit communicator works too: the last case again, on the user's COMM_WORLD.
    explicit = gcl.all_reduce(mine, case["op"], method=case["method"], comm=COMM, **kw)
    for k, leaves in enumerate(explicit):
        for j, leaf in enumerate(leaves):
            results[f"explicit_comm/{RANK * local + k}/{j}"] = np.asarray(leaf)
    gathered = COMM.gather(results, root=0)
    if RANK == 0:
        merged = {k: v for part in gathered for k, v in part.items()}
        np.savez(out, **merged)


def run_mismatch(out: str) -> None:
    shape = (5,) if RANK == SIZE - 1 else (4,)
    try:
        gcl.all_reduce([np.ones(shape, np.float32)] * 2, timeout=60)
        message = "no error"
    except ValueError as e:
        message = str(e)
    with open(f"{out}.{RANK}", "w") as f:
        f.write(message)


def run_hang(out: str) -> None:
    if RANK == 1:
        time.sleep(6)  # never enters the collective; exits once instance 0 has given up
        return
    t0 = time.monotonic()
    try:
        gcl.all_reduce([np.ones(4, np.float32)], timeout=1.0)
        message = "no error"
    except gcl.CollectiveTimeout as e:
        message = f"{type(e).__name__} after {time.monotonic() - t0:.2f} s: {e}"
    with open(out, "w") as f:
        f.write(message)
    sys.stdout.flush()
    # The abandoned requests would keep MPI_Finalize waiting; leave as a crashed job would.
    os._exit(0)


def run_waiting(out: str) -> None:
    """Instance 1 comes 2 s late: instance 0's wait is recorded in GCL_EMU_WAITING_FILE
    (instance 1 looks for it before it comes) and the record is gone once the wait ends."""
    waiting = os.environ["GCL_EMU_WAITING_FILE"]
    seen = 0.0
    if RANK == 1:
        time.sleep(2.0)
        seen = float(os.path.exists(waiting))
    total = gcl.all_reduce([np.full(1, seen, np.float32)], timeout=30.0)[0]
    if RANK == 0:
        with open(out, "w") as f:
            f.write(f"recorded while waiting: {bool(total[0])}; after: {os.path.exists(waiting)}")


def run_left(out: str) -> None:
    from gcl._transport import transport_for

    gcl.all_reduce([np.ones(4, np.float32)], timeout=30.0)
    if RANK == 0:
        return  # leaves: its notice says it ran one collective
    transport = transport_for(None)
    deadline = time.monotonic() + 30
    seen = None
    while time.monotonic() < deadline and not transport._gone:
        seen = transport._left([-1])  # reads the notice once it arrives
        time.sleep(0.01)
    during = seen  # instance 0 finished the collective instance 1 is counted in
    transport.collectives += 1  # instance 1 begins a collective instance 0 never ran
    after = transport._left([0])
    with open(out, "w") as f:
        f.write(f"{transport._gone} {during} {after}")


def run_busy(out: str) -> None:
    big = [np.full(16 * 2**20, float(RANK + 1))]  # 128 MB: MPICH's large-message protocol
    gcl.all_reduce([np.ones(1)], "add", timeout=60)  # both here, however late one started
    # The root's timeout is the one under test; the receiver's only bounds the transfer,
    # which a loaded machine may slow past a short one.
    got = gcl.broadcast(big, root=0, timeout=2 if RANK == 0 else 60)[0]
    time.sleep(4)  # a compile right after it, longer than the timeout, as ResNet-50's
    total = gcl.all_reduce([np.ones(1)], "add", timeout=30)[0][0]
    if RANK == 0:
        with open(out, "w") as f:
            f.write(f"{got[0]} {got[-1]} {total}")


if __name__ == "__main__":
    mode, out, *rest = sys.argv[1:]
    if mode == "cases":
        run_cases(out, *map(int, rest))
    elif mode == "mismatch":
        run_mismatch(out)
    elif mode == "hang":
        run_hang(out)
    elif mode == "waiting":
        run_waiting(out)
    elif mode == "left":
        run_left(out)
    elif mode == "busy":
        run_busy(out)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
