#!/usr/bin/env python3
"""One process of a job through the shim (ctypes): what cuInit answers, how many devices it
sees and their UUIDs, in order. With two file names, it then marks itself ready (the first)
and waits for a peer's mark (the second), holding its sessions meanwhile: two such processes
hold theirs at the same time.
Usage: visible_probe.py [READY_FILE PEER_READY_FILE]"""
import ctypes
import os
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")
result = cuda.cuInit(0)
count = ctypes.c_int(0)
if result == 0:
    cuda.cuDeviceGetCount(ctypes.byref(count))
uuids = []
for i in range(count.value):
    raw = (ctypes.c_ubyte * 16)()
    cuda.cuDeviceGetUuid(raw, i)
    uuids.append(bytes(raw).hex())
print(f"cuInit {result}, devices {count.value}: {' '.join(uuids)}", flush=True)
if len(sys.argv) == 3 and result == 0:
    open(sys.argv[1], "w").close()
    deadline = time.monotonic() + 20
    while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.02)
    print("peer ready" if os.path.exists(sys.argv[2]) else "peer never ready", flush=True)
