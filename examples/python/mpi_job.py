"""An MPI job: every rank opens its session collectively, asks for accelerators collectively
(all ranks are granted together, or none), computes on its own, and frees them together.

    mpirun -n 4 python mpi_job.py [COUNT]

Each rank asks for 1 accelerator (rank 0 for COUNT, default 1): when the pool is short of the
total, every rank is told so, with the same reason.
"""

import sys

import numpy as np
from mpi4py import MPI

import ac

def say(line: str) -> None:
    # One write per line: mpirun merges the ranks' output, and a line written in pieces can be
    # split by another rank's.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


comm = MPI.COMM_WORLD
rank = comm.Get_rank()
first = int(sys.argv[1]) if len(sys.argv) > 1 else 1

with ac.init(comm=comm) as session:
    mine = first if rank == 0 else 1
    granted = session.get(mine, comm=comm)
    if granted is None:
        say(f"rank {rank}: rejected: {session.rejection}")
    else:
        acc = granted[0]
        x = acc.to_device(np.full(1000, rank + 1, np.float32))
        y = acc.zeros(1000, np.float32)
        acc.builtin().get_function("saxpy")(4, 256, (np.float32(2.0), x, y, np.uint64(1000)))
        ok = bool((y.get() == 2.0 * (rank + 1)).all())
        say(f"rank {rank}: granted {len(granted)} (set {granted.id}), computed on {acc.id}: {ok}")
        session.free(granted, comm=comm)
    session.finalize(comm=comm)
