#!/usr/bin/env python3
"""NVML through the shim's libnvidia-ml.so.1, called as pynvml and PyTorch call it (ctypes):
the program's devices as NVML says them, against what the driver API (libcuda.so.1, the
same library) says of them; then what NVML refuses, by its codes. Prints a line per finding;
exits 1 at the first call that fails where it should not.
Usage: nvml_probe.py [count|pinned]
  count: init and count alone, for a job without accelerators;
  pinned: NVML's devices against the driver API's, for a process CUDA_VISIBLE_DEVICES pins."""
import ctypes
import sys
from ctypes import byref, c_int, c_size_t, c_ubyte, c_uint, c_void_p, create_string_buffer

nvml = ctypes.CDLL("libnvidia-ml.so.1")
cuda = ctypes.CDLL("libcuda.so.1")
nvml.nvmlErrorString.restype = ctypes.c_char_p


class PciInfo(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", c_uint), ("bus", c_uint), ("device", c_uint),
                ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint), ("busId", ctypes.c_char * 32)]


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def ok(what, result):
    if result != 0:
        print(f"FAILED {what}: {result} {nvml.nvmlErrorString(result).decode()}")
        sys.exit(1)


def said(what, result):
    print(f"{what}: {result} ({nvml.nvmlErrorString(result).decode()})")


said("a count before nvmlInit", nvml.nvmlDeviceGetCount_v2(byref(c_uint())))
ok("nvmlInit_v2", nvml.nvmlInit_v2())
if sys.argv[1:] == ["count"]:
    count = c_uint(99)
    ok("nvmlDeviceGetCount_v2", nvml.nvmlDeviceGetCount_v2(byref(count)))
    said("cuInit", cuda.cuInit(0))
    print(f"devices: nvml {count.value}")
    sys.exit(0)
ok("cuInit", cuda.cuInit(0))
if sys.argv[1:] == ["pinned"]:
    count, driver_count, buf = c_uint(), c_int(), create_string_buffer(96)
    ok("nvmlDeviceGetCount_v2", nvml.nvmlDeviceGetCount_v2(byref(count)))
    ok("cuDeviceGetCount", cuda.cuDeviceGetCount(byref(driver_count)))
    print(f"nvml devices {count.value}, driver {driver_count.value}")
    for i in range(count.value):
        h, uuid = c_void_p(), create_string_buffer(96)
        ok("nvmlDeviceGetHandleByIndex_v2", nvml.nvmlDeviceGetHandleByIndex_v2(i, byref(h)))
        ok("nvmlDeviceGetUUID", nvml.nvmlDeviceGetUUID(h, uuid, 96))
        print(f"nvml device {i}: {uuid.value.decode()}, its name {nvml.nvmlDeviceGetName(h, buf, 96)}")
    raw, bus, h, index = (c_ubyte * 16)(), create_string_buffer(32), c_void_p(), c_uint()
    ok("cuDeviceGetUuid", cuda.cuDeviceGetUuid(raw, 0))
    ok("cuDeviceGetPCIBusId", cuda.cuDeviceGetPCIBusId(bus, 32, 0))
    ok("nvmlDeviceGetHandleByPciBusId_v2", nvml.nvmlDeviceGetHandleByPciBusId_v2(bus.value, byref(h)))
    ok("nvmlDeviceGetIndex", nvml.nvmlDeviceGetIndex(h, byref(index)))
    print(f"driver device 0: {bytes(raw).hex()}, bus id {bus.value.decode()}, nvml device {index.value}")
    # The driver API finds its device by that bus id, and knows none at the hidden one's.
    found, pci_bus = c_int(-1), c_int(-1)
    said("cuDeviceGetByPCIBusId of device 0's bus id", cuda.cuDeviceGetByPCIBusId(byref(found), bus.value))
    print(f"that is driver device {found.value}")
    said("cuDeviceGetByPCIBusId of the hidden device's", cuda.cuDeviceGetByPCIBusId(byref(found), b"0000:01:00.0"))
    ok("cuDeviceGetAttribute", cuda.cuDeviceGetAttribute(byref(pci_bus), 33, 0))
    print(f"driver device 0's PCI bus attribute {pci_bus.value}")
    print("nvml probe done")
    sys.exit(0)
count, driver_count = c_uint(), c_int()
ok("nvmlDeviceGetCount_v2", nvml.nvmlDeviceGetCount_v2(byref(count)))
ok("cuDeviceGetCount", cuda.cuDeviceGetCount(byref(driver_count)))
print(f"devices: nvml {count.value}, driver {driver_count.value}")

handles = []
for i in range(count.value):
    h = c_void_p()
    ok("nvmlDeviceGetHandleByIndex_v2", nvml.nvmlDeviceGetHandleByIndex_v2(i, byref(h)))
    handles.append(h)
    name, driver_name = create_string_buffer(96), create_string_buffer(96)
    ok("nvmlDeviceGetName", nvml.nvmlDeviceGetName(h, name, 96))
    ok("cuDeviceGetName", cuda.cuDeviceGetName(driver_name, 96, i))
    uuid, raw = create_string_buffer(96), (c_ubyte * 16)()
    ok("nvmlDeviceGetUUID", nvml.nvmlDeviceGetUUID(h, uuid, 96))
    ok("cuDeviceGetUuid", cuda.cuDeviceGetUuid(raw, i))
    hexes = bytes(raw).hex()
    driver_uuid = f"GPU-{hexes[:8]}-{hexes[8:12]}-{hexes[12:16]}-{hexes[16:20]}-{hexes[20:]}"
    pci, by_bus = PciInfo(), c_int(-1)
    ok("nvmlDeviceGetPciInfo_v3", nvml.nvmlDeviceGetPciInfo_v3(h, byref(pci)))
    ok("cuDeviceGetByPCIBusId", cuda.cuDeviceGetByPCIBusId(byref(by_bus), pci.busId))
    by_pci, by_uuid, index = c_void_p(), c_void_p(), c_uint()
    ok("nvmlDeviceGetHandleByPciBusId_v2", nvml.nvmlDeviceGetHandleByPciBusId_v2(pci.busId, byref(by_pci)))
    ok("nvmlDeviceGetHandleByUUID", nvml.nvmlDeviceGetHandleByUUID(uuid, byref(by_uuid)))
    ok("nvmlDeviceGetIndex", nvml.nvmlDeviceGetIndex(h, byref(index)))
    major, minor, driver_major, driver_minor = c_int(), c_int(), c_int(), c_int()
    ok("nvmlDeviceGetCudaComputeCapability", nvml.nvmlDeviceGetCudaComputeCapability(h, byref(major), byref(minor)))
    ok("cuDeviceComputeCapability", cuda.cuDeviceComputeCapability(byref(driver_major), byref(driver_minor), i))
    memory, memory2, driver_total = Memory(), MemoryV2(), c_size_t()
    ok("nvmlDeviceGetMemoryInfo", nvml.nvmlDeviceGetMemoryInfo(h, byref(memory)))
    memory2.version = ctypes.sizeof(MemoryV2) | 2 << 24
    ok("nvmlDeviceGetMemoryInfo_v2", nvml.nvmlDeviceGetMemoryInfo_v2(h, byref(memory2)))
    ok("cuDeviceTotalMem_v2", cuda.cuDeviceTotalMem_v2(byref(driver_total), i))
    # nvmlGpuFabricInfo_v3_t, as PyTorch asks before its expandable segments: state (byte 28)
    # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, 0.
    fabric = (c_ubyte * 40)(*[0xFF] * 40)
    c_uint.from_buffer(fabric).value = 40 | 3 << 24
    ok("nvmlDeviceGetGpuFabricInfoV", nvml.nvmlDeviceGetGpuFabricInfoV(h, fabric))
    print(f"device {i}: name {'as the driver says' if name.value == driver_name.value else name.value}, "
          f"uuid {'as the driver says' if uuid.value.decode() == driver_uuid else uuid.value}, "
          f"pci {pci.busId.decode()} is driver device {by_bus.value}, "
          f"handles by pci {by_pci.value == h.value} and uuid {by_uuid.value == h.value}, index {index.value}, "
          f"capability {major.value}.{minor.value} {'as the driver says' if (major.value, minor.value) == (driver_major.value, driver_minor.value) else 'differs'}, "
          f"memory {'as the driver says' if memory.total == driver_total.value == memory2.total else 'differs'}, "
          f"{'used and free add up' if memory.used + memory.free == memory.total and memory2.used + memory2.free == memory2.total else 'used and free do not add up'}, "
          f"fabric state {fabric[28]}")
print(f"handles distinct: {len({h.value for h in handles}) == len(handles)}")

h0, buf, status = handles[0], create_string_buffer(96), c_int(-1)
said("an index past the devices", nvml.nvmlDeviceGetHandleByIndex_v2(count.value, byref(c_void_p())))
said("an unknown uuid", nvml.nvmlDeviceGetHandleByUUID(b"GPU-00000000-0000-0000-0000-000000000000", byref(c_void_p())))
said("a bus id of no device", nvml.nvmlDeviceGetHandleByPciBusId_v2(b"00000000:7F:00.0", byref(c_void_p())))
said("a name into 4 bytes", nvml.nvmlDeviceGetName(h0, buf, 4))
said("a forged handle", nvml.nvmlDeviceGetName(c_void_p(0x1234), buf, 96))
said("memory of struct version 1", nvml.nvmlDeviceGetMemoryInfo_v2(h0, byref(MemoryV2(version=1 << 24 | 40))))
if count.value > 1:
    ok("nvmlDeviceGetP2PStatus", nvml.nvmlDeviceGetP2PStatus(h0, handles[1], 0, byref(status)))
    print(f"p2p between devices 0 and 1: {status.value}")
said("utilization", nvml.nvmlDeviceGetUtilizationRates(h0, buf))
said("temperature", nvml.nvmlDeviceGetTemperature(h0, 0, byref(c_uint())))
said("fan speed", nvml.nvmlDeviceGetFanSpeed(h0, byref(c_uint())))
ok("nvmlSystemGetDriverVersion", nvml.nvmlSystemGetDriverVersion(buf, 80))
cuda_version = c_int()
ok("nvmlSystemGetCudaDriverVersion_v2", nvml.nvmlSystemGetCudaDriverVersion_v2(byref(cuda_version)))
print(f"driver {buf.value.decode()}, cuda {cuda_version.value}")
ok("nvmlShutdown", nvml.nvmlShutdown())
said("a count after nvmlShutdown", nvml.nvmlDeviceGetCount_v2(byref(c_uint())))
said("nvmlShutdown again", nvml.nvmlShutdown())
print("nvml probe done")
