"""The Python SDK's side of `ac-bench --only python` (bench/src/python.rs runs it and the Rust
SDK's side against the same backend, in the same run). Prints `key value` lines.

    AC_BACKEND_ADDR=... AC_CA_CERT=... python sdk_bench.py CALLS LAUNCHES MIB
"""

import sys
import time

import numpy as np

import ac

calls, launches, mib = (int(a) for a in sys.argv[1:4])
acc = ac.connect()

# A small synchronous call: 4 bytes back from the device (a round trip, ordered after all work).
small = acc.to_device(np.zeros(1, np.float32))
out = np.empty(1, np.float32)
for _ in range(calls // 10):
    small.get(out=out)
start = time.perf_counter()
for _ in range(calls):
    small.get(out=out)
print(f"small_call_us {(time.perf_counter() - start) / calls * 1e6:.2f}")

# Asynchronous launches of a one-element kernel, then one synchronize.
x = acc.zeros(1, np.float32)
fill = acc.builtin().get_function("fill")
args = (x, np.float32(1.0), np.uint64(1))
for _ in range(launches // 10):
    fill(1, 1, args)
acc.synchronize()
start = time.perf_counter()
for _ in range(launches):
    fill(1, 1, args)
acc.synchronize()
print(f"launches_per_s {launches / (time.perf_counter() - start):.0f}")

# One large copy each way (after one each way first: pages touched, staging warm).
host = np.full(mib << 20, 7, np.uint8)
back = np.empty_like(host)
dev = acc.to_device(host)
dev.get(out=back)
start = time.perf_counter()
dev.set(host)
print(f"h2d_mb_s {host.nbytes / (time.perf_counter() - start) / 1e6:.0f}")
start = time.perf_counter()
dev.get(out=back)
print(f"d2h_mb_s {host.nbytes / (time.perf_counter() - start) / 1e6:.0f}")
assert (back == 7).all()
