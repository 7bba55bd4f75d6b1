#!/usr/bin/env python3
"""NVML's sensor readings and process lists through the shim's libnvidia-ml.so.1 (ctypes, as
pynvml calls it), for device 0 of the job: each reading, the processes on it (this one, holding
3 MiB it allocates), then NVML's codes for what it refuses. With a path argument, the machine is
then rewritten (the file renamed over the one NVML_STANDIN_STATE names, as a GPU's sensors move
while a program runs) and everything read again. With a second path, the machine is rewritten
again, its GPU lost (fallen off the bus), and read once more. Prints a line per finding.
Usage: nvml_sensors.py [NEXT_STATE_FILE [LOST_STATE_FILE]]"""
import ctypes
import os
import sys
import time
from ctypes import byref, c_int, c_uint, c_ulonglong, c_void_p, create_string_buffer

nvml = ctypes.CDLL("libnvidia-ml.so.1")
cuda = ctypes.CDLL("libcuda.so.1")
nvml.nvmlErrorString.restype = ctypes.c_char_p


class Process(ctypes.Structure):
    """nvmlProcessInfo_t (v2, what the _v3 function fills)."""
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong), ("gpuInstanceId", c_uint),
                ("computeInstanceId", c_uint)]


class ProcessV1(ctypes.Structure):
    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class Temperature(ctypes.Structure):
    _fields_ = [("version", c_uint), ("sensorType", c_uint), ("temperature", c_int)]


def ok(what, result):
    if result != 0:
        print(f"FAILED {what}: {result} {nvml.nvmlErrorString(result).decode()}")
        sys.exit(1)


def reading(call, *args, kind=c_uint):
    """A reading, or the code NVML answered, as text."""
    value = kind()
    result = call(*args, byref(value))
    return str(value.value) if result == 0 else f"error {result} ({nvml.nvmlErrorString(result).decode()})"


def read_all(h, round_):
    util = Utilization()
    result = nvml.nvmlDeviceGetUtilizationRates(h, byref(util))
    utilization = f"{util.gpu}/{util.memory}" if result == 0 else f"error {result}"
    temp_v = Temperature(version=ctypes.sizeof(Temperature) | 1 << 24, sensorType=0)
    result = nvml.nvmlDeviceGetTemperatureV(h, byref(temp_v))
    print(f"round {round_}: utilization {utilization}, "
          f"temperature {reading(nvml.nvmlDeviceGetTemperature, h, 0)}, "
          f"temperature v {temp_v.temperature if result == 0 else f'error {result}'}, "
          f"power {reading(nvml.nvmlDeviceGetPowerUsage, h)}, "
          f"limit {reading(nvml.nvmlDeviceGetEnforcedPowerLimit, h)}, "
          f"management limit {reading(nvml.nvmlDeviceGetPowerManagementLimit, h)}, "
          f"energy {reading(nvml.nvmlDeviceGetTotalEnergyConsumption, h, kind=c_ulonglong)}, "
          f"clocks {'/'.join(reading(nvml.nvmlDeviceGetClockInfo, h, d) for d in range(4))}, "
          f"max clocks {'/'.join(reading(nvml.nvmlDeviceGetMaxClockInfo, h, d) for d in range(4))}, "
          f"pstate {reading(nvml.nvmlDeviceGetPerformanceState, h)}")


def started():
    """This process's program as started, the first word of its command line: what NVML names
    a process by."""
    with open("/proc/self/cmdline", "rb") as cmdline:
        return cmdline.read().split(b"\0")[0].decode()


def processes(h):
    count = c_uint(0)
    print(f"processes asked with room for 0: {nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, byref(count), None)}, "
          f"count {count.value}")
    infos = (Process * 4)()
    count = c_uint(4)
    ok("nvmlDeviceGetComputeRunningProcesses_v3", nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, byref(count), infos))
    mine = [p for p in infos[:count.value] if p.pid == os.getpid()]
    v1, v1_count = (ProcessV1 * 2)(), c_uint(2)
    ok("nvmlDeviceGetComputeRunningProcesses", nvml.nvmlDeviceGetComputeRunningProcesses(h, byref(v1_count), v1))
    name = create_string_buffer(256)
    ok("nvmlSystemGetProcessName", nvml.nvmlSystemGetProcessName(os.getpid(), name, 256))
    graphics = c_uint(4)
    ok("nvmlDeviceGetGraphicsRunningProcesses_v3",
       nvml.nvmlDeviceGetGraphicsRunningProcesses_v3(h, byref(graphics), infos))
    print(f"processes {count.value}, this one {len(mine)} using {mine[0].usedGpuMemory if mine else None} bytes, "
          f"instance ids {hex(mine[0].gpuInstanceId) if mine else None}, "
          f"v1 {v1_count.value} pid {'this one' if v1[0].pid == os.getpid() else v1[0].pid} "
          f"using {v1[0].usedGpuMemory}, "
          f"named {'as started' if name.value.decode() == started() else name.value}, graphics {graphics.value}")


ok("nvmlInit_v2", nvml.nvmlInit_v2())
ok("cuInit", cuda.cuInit(0))
context, memory, h = c_void_p(), c_ulonglong(), c_void_p()
ok("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(byref(context), 0))
ok("cuCtxSetCurrent", cuda.cuCtxSetCurrent(context))
ok("cuMemAlloc_v2", cuda.cuMemAlloc_v2(byref(memory), 3 << 20))
ok("nvmlDeviceGetHandleByIndex_v2", nvml.nvmlDeviceGetHandleByIndex_v2(0, byref(h)))
read_all(h, 1)
processes(h)
# What a reading costs (a round trip to the backend, which asks its host's NVML): reported, not
# checked.
util, started_at = Utilization(), time.perf_counter()
answers = {nvml.nvmlDeviceGetUtilizationRates(h, byref(util)) for _ in range(100)}
print(f"100 utilization readings: {(time.perf_counter() - started_at) * 1e4:.0f} us each, answered {sorted(answers)}")
print(f"the hottest part's sensor: {nvml.nvmlDeviceGetTemperature(h, 1, byref(c_uint()))}")
print(f"a sensor past the list: {nvml.nvmlDeviceGetTemperature(h, 7, byref(c_uint()))}")
print(f"a clock domain past the list: {nvml.nvmlDeviceGetClockInfo(h, 4, byref(c_uint()))}")
print(f"temperature of struct version 2: "
      f"{nvml.nvmlDeviceGetTemperatureV(h, byref(Temperature(version=12 | 2 << 24)))}")
print(f"power of a forged handle: {nvml.nvmlDeviceGetPowerUsage(c_void_p(0x1234), byref(c_uint()))}")
print(f"another process's name: {nvml.nvmlSystemGetProcessName(1, create_string_buffer(64), 64)}")
short = (ctypes.c_char * 5)(*b"\xff" * 5)
result = nvml.nvmlSystemGetProcessName(os.getpid(), short, 4)
cut = started().encode()[:3] + b"\0\xff"
print(f"this process's name into 4 bytes: {result}, "
      f"{'its first 3 bytes and a NUL' if bytes(short) == cut else bytes(short)}")
mps = c_uint(4)
result = nvml.nvmlDeviceGetMPSComputeRunningProcesses_v3(h, byref(mps), (Process * 4)())
print(f"MPS processes: {result}, count {mps.value}")
if len(sys.argv) > 1:
    os.replace(sys.argv[1], os.environ["NVML_STANDIN_STATE"])
    ok("cuMemFree_v2", cuda.cuMemFree_v2(memory))
    read_all(h, 2)
    processes(h)
if len(sys.argv) > 2:
    os.replace(sys.argv[2], os.environ["NVML_STANDIN_STATE"])
    print(f"lost: temperature {nvml.nvmlDeviceGetTemperature(h, 0, byref(c_uint()))}, "
          f"utilization {nvml.nvmlDeviceGetUtilizationRates(h, byref(Utilization()))}, "
          f"name {nvml.nvmlDeviceGetName(h, create_string_buffer(96), 96)}")
ok("nvmlShutdown", nvml.nvmlShutdown())
print("nvml sensors done")
