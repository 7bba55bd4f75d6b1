#!/usr/bin/env python3
"""A process that asks NVML, then forks children that use CUDA: as PyTorch's `device_count` (NVML,
so as not to start CUDA) before its `DataLoader`'s or a server's forked workers. Through the
shim's libnvidia-ml.so.1 and libcuda.so.1 (ctypes). The children forked before the parent
started CUDA each compute on the device (a copy round trip); then the parent does; then a child
forked after CUDA started is refused CUDA, as NVIDIA's driver refuses one. Prints a line per
finding; exits 1 at the first call that fails where it should not.
With `abrupt`, the children end as `multiprocessing`'s workers do, with `_exit`, holding 1 MiB
of device memory each, and the parent says `parent: waiting` once they have exited and reads a
line from stdin before it goes on (the test looks at the backend meanwhile).
tests/tests/e2e/cuda_frameworks.rs and session_ends.rs run it."""
import ctypes
import os
import sys
from ctypes import byref, c_int, c_size_t, c_uint, c_uint64, c_void_p

nvml = ctypes.CDLL("libnvidia-ml.so.1")
cuda = ctypes.CDLL("libcuda.so.1")
NOT_INITIALIZED = 3


def ok(who, what, result):
    if result != 0:
        print(f"{who}: FAILED {what}: {result}", flush=True)
        os._exit(1)


def nvml_count(who):
    count = c_uint(99)
    ok(who, "nvmlDeviceGetCount_v2", nvml.nvmlDeviceGetCount_v2(byref(count)))
    return count.value


def round_trip(who, n_bytes, free=True):
    """cuInit, the devices, and on each a copy in and out of device memory, compared; the
    memory is freed unless `free` is false."""
    ok(who, "cuInit", cuda.cuInit(0))
    count = c_int()
    ok(who, "cuDeviceGetCount", cuda.cuDeviceGetCount(byref(count)))
    for device in range(count.value):
        ctx, ptr = c_void_p(), c_uint64()
        ok(who, "cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(byref(ctx), device))
        ok(who, "cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
        ok(who, "cuMemAlloc_v2", cuda.cuMemAlloc_v2(byref(ptr), c_size_t(n_bytes)))
        data = bytes((os.getpid() + i * 7 + device) % 251 for i in range(n_bytes))
        back = ctypes.create_string_buffer(n_bytes)
        ok(who, "cuMemcpyHtoD_v2", cuda.cuMemcpyHtoD_v2(ptr, data, c_size_t(n_bytes)))
        ok(who, "cuMemcpyDtoH_v2", cuda.cuMemcpyDtoH_v2(back, ptr, c_size_t(n_bytes)))
        if free:
            ok(who, "cuMemFree_v2", cuda.cuMemFree_v2(ptr))
        if back.raw != data:
            print(f"{who}: FAILED device {device}: the copy came back different", flush=True)
            os._exit(1)
    kept = "" if free else ", left held"
    print(f"{who}: {count.value} device(s), {n_bytes} bytes there and back exact{kept}", flush=True)


def wait(child):
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


ABRUPT = sys.argv[1:] == ["abrupt"]
ok("parent", "nvmlInit_v2", nvml.nvmlInit_v2())
print(f"parent: nvml devices {nvml_count('parent')}", flush=True)
# Two children at once, each with its own session; then the parent, whose session NVML opened.
children = []
for k in range(2):
    child = os.fork()
    if child == 0:
        who = f"child {k}"
        # Its own session opens here, in its parent's job.
        print(f"{who}: nvml devices {nvml_count(who)}", flush=True)
        if ABRUPT:
            # No exit handler runs: the parent ends the child's session.
            round_trip(who, 1 << 20, free=False)
            os._exit(0)
        round_trip(who, 1 << 16)
        # Through exit(): the shim's exit handler gives the child's session back.
        sys.exit(0)
    children.append(child)
for k, child in enumerate(children):
    print(f"child {k} exited with {wait(child)}", flush=True)
if ABRUPT:
    print("parent: waiting", flush=True)
    sys.stdin.readline()
round_trip("parent", 1 << 16)
# CUDA has started: a child forked now is refused it.
child = os.fork()
if child == 0:
    result = cuda.cuInit(0)
    print(f"late child: cuInit {result}", flush=True)
    sys.exit(0 if result == NOT_INITIALIZED else 2)
print(f"late child exited with {wait(child)}", flush=True)
print("nvml fork done", flush=True)
