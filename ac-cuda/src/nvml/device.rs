//! NVML's device queries: the job's accelerators on the node, by index, UUID or PCI bus id,
//! answered from what the driver API answers of them.

use std::ffi::{c_char, c_int, c_uint};

use super::{copy_string, device_of, guard, handle_of, slot_of, slots, VERSION_MISMATCH};
use crate::error::{code, CuResult, Error};
use crate::init::{capability, pci_location, slot_at, text_of};
use crate::state::{self, put, Device};
use crate::uuid::{of as uuid_of, text as uuid_text};

/// `nvmlPciInfo_t` (the version `nvmlDeviceGetPciInfo_v3` fills).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemoryV2 {
    version: c_uint,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

/// `NVML_STRUCT_VERSION(Memory, 2)`: the struct's size and its version in the top byte.
const MEMORY_V2: c_uint = size_of::<MemoryV2>() as c_uint | 2 << 24;
/// NVIDIA's PCI vendor id, in the low half of `pciDeviceId` (the device's model id, the high
/// half, is the remote host's business: 0).
const NVIDIA: c_uint = 0x10de;
/// `NVML_P2P_STATUS_OK` and `NVML_P2P_STATUS_NOT_SUPPORTED`.
const P2P_OK: c_int = 0;
const P2P_NOT_SUPPORTED: c_int = 5;
/// The sizes of `nvmlGpuFabricInfo_t` (no version field) and of versions 2 and 3 of
/// `nvmlGpuFabricInfoV_t`: all zero is `NVML_GPU_FABRIC_STATE_NOT_SUPPORTED`, status success.
const FABRIC_INFO_V1: usize = 28;
const FABRIC_INFO_V2: usize = 36;
const FABRIC_INFO_V3: usize = 40;

/// Writes the handle of the device at `index` to `out`, if NVML lists that many.
unsafe fn put_handle(out: *mut *const u8, index: usize) -> CuResult<()> {
    if index >= slots()?.len() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    put(out, handle_of(index)?)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> u32 {
    guard("nvmlDeviceGetCount", || put(count, slots()?.len() as c_uint))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> u32 {
    nvmlDeviceGetCount_v2(count)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut *const u8) -> u32 {
    guard("nvmlDeviceGetHandleByIndex", || put_handle(device, index as usize))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut *const u8) -> u32 {
    nvmlDeviceGetHandleByIndex_v2(index, device)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut *const u8) -> u32 {
    guard("nvmlDeviceGetHandleByUUID", || {
        let wanted = text_of(uuid)?;
        let found = slots()?.iter().position(|s| uuid_text(&uuid_of(&s.id)).eq_ignore_ascii_case(wanted.trim()));
        put_handle(device, found.ok_or(Error::Code(code::NOT_FOUND))?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(bus_id: *const c_char, device: *mut *const u8) -> u32 {
    guard("nvmlDeviceGetHandleByPciBusId", || {
        let count = slots()?.len();
        let slot = slot_at(&text_of(bus_id)?).filter(|&s| s < count);
        put_handle(device, slot.ok_or(Error::Code(code::NOT_FOUND))?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(bus_id: *const c_char, device: *mut *const u8) -> u32 {
    nvmlDeviceGetHandleByPciBusId_v2(bus_id, device)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: *const u8, index: *mut c_uint) -> u32 {
    guard("nvmlDeviceGetIndex", || put(index, slot_of(device)?.0 as c_uint))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(device: *const u8, name: *mut c_char, length: c_uint) -> u32 {
    guard("nvmlDeviceGetName", || copy_string(name, length, &device_of(device)?.info.name))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: *const u8, uuid: *mut c_char, length: c_uint) -> u32 {
    guard("nvmlDeviceGetUUID", || copy_string(uuid, length, &uuid_text(&uuid_of(&slot_of(device)?.1.id))))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: *const u8,
    major: *mut c_int,
    minor: *mut c_int,
) -> u32 {
    guard("nvmlDeviceGetCudaComputeCapability", || {
        let (ma, mi) = capability(device_of(device)?);
        put(major, ma)?;
        put(minor, mi)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: *const u8, pci: *mut PciInfo) -> u32 {
    guard("nvmlDeviceGetPciInfo", || {
        let (domain, bus, dev) = pci_location(slot_of(device)?.0);
        let mut info = PciInfo {
            bus_id_legacy: [0; 16],
            domain,
            bus,
            device: dev,
            pci_device_id: NVIDIA,
            pci_sub_system_id: 0,
            bus_id: [0; 32],
        };
        copy_string(info.bus_id_legacy.as_mut_ptr(), 16, &format!("{domain:04X}:{bus:02X}:{dev:02X}.0"))?;
        copy_string(info.bus_id.as_mut_ptr(), 32, &format!("{domain:08X}:{bus:02X}:{dev:02X}.0"))?;
        put(pci, info)
    })
}

/// The device's memory as its backend counts it now (the whole GPU's, every process's use).
fn memory_of(device: &Device) -> CuResult<(u64, u64)> {
    let shim = state::shim()?;
    let info = shim.block_on(device.acc.device_info())?;
    Ok((info.memory_total, info.memory_free.min(info.memory_total)))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: *const u8, memory: *mut Memory) -> u32 {
    guard("nvmlDeviceGetMemoryInfo", || {
        let (total, free) = memory_of(device_of(device)?)?;
        put(memory, Memory { total, free, used: total - free })
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: *const u8, memory: *mut MemoryV2) -> u32 {
    guard("nvmlDeviceGetMemoryInfo_v2", || {
        let d = device_of(device)?;
        if memory.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        if (*memory).version != MEMORY_V2 {
            return Err(Error::Code(VERSION_MISMATCH));
        }
        let (total, free) = memory_of(d)?;
        put(memory, MemoryV2 { version: MEMORY_V2, total, reserved: 0, free, used: total - free })
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    one: *const u8,
    other: *const u8,
    _index: c_int,
    status: *mut c_int,
) -> u32 {
    guard("nvmlDeviceGetP2PStatus", || {
        let (a, b) = (slot_of(one)?.0, slot_of(other)?.0);
        // As `cuDeviceCanAccessPeer`: two devices reach each other only through the program.
        put(status, if a == b { P2P_OK } else { P2P_NOT_SUPPORTED })
    })
}

/// Zeroes `len` bytes of `info` from `from`: the fabric info of a device no fabric reaches.
unsafe fn no_fabric(info: *mut u8, from: usize, len: usize) -> CuResult<()> {
    if info.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    std::ptr::write_bytes(info.add(from), 0, len - from);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfo(device: *const u8, info: *mut u8) -> u32 {
    guard("nvmlDeviceGetGpuFabricInfo", || {
        slot_of(device)?;
        no_fabric(info, 0, FABRIC_INFO_V1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfoV(device: *const u8, info: *mut u8) -> u32 {
    guard("nvmlDeviceGetGpuFabricInfoV", || {
        slot_of(device)?;
        if info.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let version = (info as *const c_uint).read_unaligned();
        let len = match version >> 24 {
            2 => FABRIC_INFO_V2,
            3 => FABRIC_INFO_V3,
            _ => return Err(Error::Code(VERSION_MISMATCH)),
        };
        if version & 0xff_ffff != len as c_uint {
            return Err(Error::Code(VERSION_MISMATCH));
        }
        no_fabric(info, size_of::<c_uint>(), len)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper_sys::bindings as nvml;

    #[test]
    fn the_structs_are_nvml_h_s() {
        assert_eq!(size_of::<PciInfo>(), size_of::<nvml::nvmlPciInfo_t>());
        assert_eq!(size_of::<Memory>(), size_of::<nvml::nvmlMemory_t>());
        assert_eq!(size_of::<MemoryV2>(), size_of::<nvml::nvmlMemory_v2_t>());
        assert_eq!(FABRIC_INFO_V1, size_of::<nvml::nvmlGpuFabricInfo_t>());
        assert_eq!(FABRIC_INFO_V2, size_of::<nvml::nvmlGpuFabricInfo_v2_t>());
        assert_eq!(FABRIC_INFO_V3, size_of::<nvml::nvmlGpuFabricInfo_v3_t>());
        assert_eq!(std::mem::offset_of!(PciInfo, bus_id), std::mem::offset_of!(nvml::nvmlPciInfo_t, busId));
        assert_eq!(std::mem::offset_of!(MemoryV2, used), std::mem::offset_of!(nvml::nvmlMemory_v2_t, used));
    }
}
