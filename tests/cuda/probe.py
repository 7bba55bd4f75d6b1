"""A Python program that drives CUDA through ctypes and the CUDA 12.9 runtime (libcudart.so.12,
which loads libcuda.so.1 at run time): device count, attributes, memory, a copy round trip.
Usage: probe.py PATH/libcudart.so.12"""
import ctypes
import sys

rt = ctypes.CDLL(sys.argv[1])


def check(what, err):
    if err != 0:
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        print(f"FAILED {what}: {err} {rt.cudaGetErrorString(err).decode()}")
        sys.exit(1)


version = ctypes.c_int()
check("cudaRuntimeGetVersion", rt.cudaRuntimeGetVersion(ctypes.byref(version)))
count = ctypes.c_int()
check("cudaGetDeviceCount", rt.cudaGetDeviceCount(ctypes.byref(count)))
major, minor, sms = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
check("major", rt.cudaDeviceGetAttribute(ctypes.byref(major), 75, 0))
check("minor", rt.cudaDeviceGetAttribute(ctypes.byref(minor), 76, 0))
check("multiprocessors", rt.cudaDeviceGetAttribute(ctypes.byref(sms), 16, 0))
free, total = ctypes.c_size_t(), ctypes.c_size_t()
check("cudaMemGetInfo", rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)))
n = 1 << 16
data = (ctypes.c_ubyte * n)(*[(i * 7) % 251 for i in range(n)])
back = (ctypes.c_ubyte * n)()
dev = ctypes.c_void_p()
check("cudaMalloc", rt.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(n)))
check("cudaMemcpy H2D", rt.cudaMemcpy(dev, data, ctypes.c_size_t(n), 1))
check("cudaMemcpy D2H", rt.cudaMemcpy(back, dev, ctypes.c_size_t(n), 2))
check("cudaFree", rt.cudaFree(dev))
assert bytes(back) == bytes(data), "round trip differs"
print(f"runtime {version.value}: {count.value} device(s), compute {major.value}.{minor.value}, "
      f"{sms.value} SMs, {total.value >> 20} MiB; {n}-byte round trip exact")
