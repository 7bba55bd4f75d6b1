"""A Python program's checked loop through a network outage (issue 50), run by
`tests/tests/e2e/resumption.rs` on an emulated host; not a pytest module.

Threads share the job's first accelerator and one kernel; each, round after round, queues 50
launches of the builtin `saxpy` that add 1 to each of its counters, copies 1 MiB of
round-specific bytes to the device and back and checks them byte for byte, then reads its
counters: each must equal the launches it made (every launch ran exactly once). Prints
`task T round N ok mark M launches L` (M: the number in the file AC_NET_MARK names when the round
began), or `wrong ...` (exit 1), or `error: ...` (exit 2). Runs until killed.

Usage: python outage_program.py THREADS
"""

import os
import sys
import threading

import numpy as np

import ac

COUNTERS = 4096
LAUNCHES = 50
BYTES = 1 << 20


def mark() -> int:
    path = os.environ.get("AC_NET_MARK")
    try:
        with open(path or "", encoding="ascii") as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def say(line: str) -> None:
    # One write per line: print() writes the line and its newline apart, and two threads'
    # lines would interleave.
    os.write(1, (line + "\n").encode())


def task(acc: ac.Accelerator, saxpy: ac.Function, me: int) -> None:
    try:
        counters = acc.zeros(COUNTERS, np.float32)
        ones = acc.to_device(np.ones(COUNTERS, np.float32))
        data_dev = acc.empty(BYTES, np.uint8)
        launches = 0
        index = np.arange(BYTES, dtype=np.uint32)
        for round_ in range(1 << 62):
            m = mark()
            for _ in range(LAUNCHES):
                saxpy[COUNTERS // 256, 256](np.float32(1.0), ones, counters, np.uint64(COUNTERS))
            launches += LAUNCHES
            data = ((index * np.uint32(2654435761) + np.uint32((me << 20) + round_)) >> np.uint32(24)).astype(np.uint8)
            data_dev.set(data)
            if not np.array_equal(data_dev.get(), data):
                say(f"wrong task {me} round {round_}: the bytes differ")
                os._exit(1)
            counted = counters.get()
            if not (counted == launches).all():
                bad = counted[counted != launches][0]
                say(f"wrong task {me} round {round_}: a counter holds {bad} after {launches} launches")
                os._exit(1)
            say(f"task {me} round {round_} ok mark {m} launches {launches}")
    except ac.Error as e:
        say(f"error: task {me}: {e}")
        os._exit(2)


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    session = ac.init()
    acc = session.accelerators[0]
    saxpy = acc.builtin().get_function("saxpy")
    workers = [threading.Thread(target=task, args=(acc, saxpy, i)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
