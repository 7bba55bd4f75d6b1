//! `cuInit`, versions, device queries and error strings: all answered
//! locally, from what the session learned when it opened (queries that cannot change never
//! cross the network).

use std::ffi::{c_char, c_int, c_uint, CStr};

use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::{self, put, Device};

/// The CUDA version this driver reports: what `cuda.h` 13.0 programs and runtimes need.
pub const DRIVER_VERSION: c_int = 13000;

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> u32 {
    guard("cuInit", || {
        if flags != 0 {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        state::init().map(drop)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> u32 {
    guard("cuDriverGetVersion", || put(version, DRIVER_VERSION))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> u32 {
    guard("cuDeviceGetCount", || put(count, state::shim()?.devices.len() as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> u32 {
    guard("cuDeviceGet", || {
        state::shim()?.device(ordinal)?;
        put(device, ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> u32 {
    guard("cuDeviceGetName", || {
        let d = state::shim()?.device(device)?;
        copy_name(name, len, &d.info.name)
    })
}

/// Copies `text` into a C buffer of `len` bytes, cut to fit, NUL-terminated.
unsafe fn copy_name(out: *mut c_char, len: c_int, text: &str) -> Result<(), Error> {
    if out.is_null() || len <= 0 {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let n = text.len().min(len as usize - 1);
    std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, out, n);
    *out.add(n) = 0;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: c_int) -> u32 {
    guard("cuDeviceTotalMem", || put(bytes, state::shim()?.device(device)?.info.memory_total as usize))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], device: c_int) -> u32 {
    guard("cuDeviceGetUuid", || put(uuid, state::shim()?.device(device)?.uuid))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], device: c_int) -> u32 {
    cuDeviceGetUuid(uuid, device)
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetLuid(_luid: *mut c_char, _mask: *mut c_uint, device: c_int) -> u32 {
    // LUIDs are Windows's.
    guard("cuDeviceGetLuid", || {
        state::shim()?.device(device)?;
        Err(Error::Code(code::NOT_SUPPORTED))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, device: c_int) -> u32 {
    guard("cuDeviceComputeCapability", || {
        let (ma, mi) = capability(state::shim()?.device(device)?);
        put(major, ma)?;
        put(minor, mi)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: c_int) -> u32 {
    guard("cuDeviceGetAttribute", || {
        let d = state::shim()?.device(device)?;
        put(value, attribute_of(d, device, attribute))
    })
}

/// CUDA 2.0's device properties: `CUdevprop`'s fourteen `int`s are attributes 1 to 14 in order
/// (threads per block, block and grid dimensions, shared and constant memory, warp size,
/// pitch, registers, clock rate, texture alignment).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetProperties(properties: *mut [c_int; 14], device: c_int) -> u32 {
    guard("cuDeviceGetProperties", || {
        let d = state::shim()?.device(device)?;
        put(properties, std::array::from_fn(|i| attribute_of(d, device, i as c_int + 1)))
    })
}

/// `CU_ATOMIC_OPERATION_MAX`: the operations `CUatomicOperation` names are below it.
const ATOMIC_OPERATIONS: u32 = 13;

/// CUDA 13: which atomic operations the link between a device and the host does natively:
/// none, over a network (as `CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED` says, 0).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetHostAtomicCapabilities(
    capabilities: *mut c_uint,
    operations: *const u32,
    count: c_uint,
    device: c_int,
) -> u32 {
    guard("cuDeviceGetHostAtomicCapabilities", || {
        state::shim()?.device(device)?;
        no_native_atomics(capabilities, operations, count)
    })
}

/// CUDA 13: which atomic operations the link between two devices does natively: none, since
/// no device here maps another's memory (as `cuDeviceGetP2PAttribute` answers).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetP2PAtomicCapabilities(
    capabilities: *mut c_uint,
    operations: *const u32,
    count: c_uint,
    source: c_int,
    destination: c_int,
) -> u32 {
    guard("cuDeviceGetP2PAtomicCapabilities", || {
        let shim = state::shim()?;
        shim.device(source)?;
        shim.device(destination)?;
        if source == destination {
            return Err(Error::said(code::INVALID_DEVICE, "a link from a device to itself"));
        }
        no_native_atomics(capabilities, operations, count)
    })
}

/// Answers no capability for each of `count` operations, after checking them.
unsafe fn no_native_atomics(capabilities: *mut c_uint, operations: *const u32, count: c_uint) -> CuResult<()> {
    if capabilities.is_null() || operations.is_null() || count == 0 {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let operations = std::slice::from_raw_parts(operations, count as usize);
    if let Some(bad) = operations.iter().find(|&&op| op >= ATOMIC_OPERATIONS) {
        return Err(Error::said(code::INVALID_VALUE, format!("atomic operation {bad}")));
    }
    std::slice::from_raw_parts_mut(capabilities, count as usize).fill(0);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(out: *mut c_char, len: c_int, device: c_int) -> u32 {
    guard("cuDeviceGetPCIBusId", || {
        let (domain, bus, dev) = pci_location(state::shim()?.device(device)?.slot);
        copy_name(out, len, &format!("{domain:04x}:{bus:02x}:{dev:02x}.0"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(device: *mut c_int, bus_id: *const c_char) -> u32 {
    guard("cuDeviceGetByPCIBusId", || {
        let shim = state::shim()?;
        let slot = slot_at(&text_of(bus_id)?).and_then(|s| shim.node.get(s)?.ordinal);
        put(device, slot.ok_or(Error::Code(code::INVALID_DEVICE))? as c_int)
    })
}

/// The text of a C string argument; a null one is an invalid value.
pub unsafe fn text_of<'a>(s: *const c_char) -> Result<std::borrow::Cow<'a, str>, Error> {
    if s.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    Ok(CStr::from_ptr(s).to_string_lossy())
}

/// The PCI domain, bus and device numbers of the job's accelerator in `slot` on this node
/// ([`state::Shim::node`]): a placeholder per slot (the remote GPU's own location is its
/// host's, and two hosts' GPUs may share one), the same in the driver API's attributes and bus
/// ids and in NVML's, whichever devices `CUDA_VISIBLE_DEVICES` leaves the process, as a GPU's
/// location does not change with the variable.
pub fn pci_location(slot: usize) -> (u32, u32, u32) {
    (0, slot as u32 + 1, 0)
}

/// The slot whose [`pci_location`] a PCI bus id names: `[domain:]bus:device.function`, in
/// hexadecimal (the driver API writes a domain of 4 digits, NVML of 8).
pub fn slot_at(bus_id: &str) -> Option<usize> {
    let (location, function) = bus_id.trim().rsplit_once('.')?;
    let parts: Vec<u32> = location.split(':').map(|p| u32::from_str_radix(p, 16).ok()).collect::<Option<_>>()?;
    let (domain, bus, device) = match parts[..] {
        [domain, bus, device] => (domain, bus, device),
        [bus, device] => (0, bus, device),
        _ => return None,
    };
    let slot = (bus as usize).checked_sub(1)?;
    (u32::from_str_radix(function, 16) == Ok(0) && pci_location(slot) == (domain, bus, device)).then_some(slot)
}

/// The device's compute capability; a CUDA accelerator always reports one.
pub fn capability(d: &Device) -> (c_int, c_int) {
    let (major, minor) = d.info.compute_capability.unwrap_or((9, 0));
    (major as c_int, minor as c_int)
}

/// One attribute of a device. The compute capability and memory are the remote GPU's; the
/// limits are its architecture's (the same for every GPU of a compute capability); sizes
/// that vary between models of one architecture (multiprocessors, clocks, L2) are the
/// architecture's flagship's, and the PCI location is a per-slot placeholder ([`pci_location`]:
/// the runtime's integrity check hashes it, NVML's lookups by bus id read it).
pub fn attribute_of(d: &Device, ordinal: c_int, attribute: c_int) -> c_int {
    let (major, minor) = capability(d);
    let hopper = major >= 9;
    match attribute {
        1 => 1024,       // max threads per block
        2 | 3 => 1024,   // max block dim x, y
        4 => 64,         // max block dim z
        5 => i32::MAX,   // max grid dim x
        6 | 7 => 65535,  // max grid dim y, z
        8 => 48 << 10,   // shared memory per block
        9 => 64 << 10,   // constant memory
        10 => 32,        // warp size
        11 => i32::MAX,  // max pitch
        12 => 65536,     // registers per block
        13 => 1_755_000, // clock (kHz)
        14 => 512,       // texture alignment
        15 => 1,         // gpu overlap
        16 => {
            if hopper {
                132
            } else {
                108
            }
        } // multiprocessors
        17 => 0,         // kernel exec timeout
        18 => 0,         // integrated
        19 => 1,         // can map host memory
        20 => 0,         // compute mode: default
        31 => 1,         // concurrent kernels
        32 => 1,         // ECC enabled
        33 => pci_location(d.slot).1 as c_int, // PCI bus
        34 => pci_location(d.slot).2 as c_int, // PCI device
        35 => 0,         // TCC driver
        36 => 2_619_000, // memory clock (kHz)
        37 => 5120,      // memory bus width
        38 => {
            if hopper {
                50 << 20
            } else {
                40 << 20
            }
        } // L2 bytes
        39 => 2048,      // threads per multiprocessor
        40 => 2,         // async engines
        41 => 1,         // unified addressing
        50 => pci_location(d.slot).0 as c_int, // PCI domain
        75 => major,
        76 => minor,
        78 => 1,      // stream priorities
        79 | 80 => 1, // global/local L1 cache
        81 => {
            if hopper {
                228 << 10
            } else {
                164 << 10
            }
        } // shared memory per multiprocessor
        82 => 65536,  // registers per multiprocessor
        83 => 1,      // managed memory (the shim keeps it: `managed`)
        84 => 0,      // multi-GPU board
        86 => 0,      // native atomics with the host: none over a network
        87 => 2,      // single/double perf ratio
        88 => 0,      // pageable host memory access: the device cannot reach the program's
        89 => 0,      // concurrent managed access: the host waits for the device (`managed`)
        90 => 1,      // compute preemption
        95 => 1,      // cooperative launch (`cuLaunchCooperativeKernel`)
        97 => {
            if hopper {
                227 << 10
            } else {
                163 << 10
            }
        } // opt-in shared memory per block
        106 => 32,    // blocks per multiprocessor
        // Access policy windows (compute capability 8.0 on) are taken as hints
        // (`crate::stream::attributes`).
        109 if major >= 8 => crate::stream::attributes::MAX_WINDOW as c_int,
        111 => 1 << 10, // reserved shared memory per block
        // Virtual memory management (`crate::vmm`): a GPU behind a backend of protocol 14 that
        // serves it (session workers).
        102 => crate::vmm::supported(ordinal as usize).into(),
        // Its physical memory exported as POSIX descriptors (`crate::vmm::shareable`): protocol 19.
        103 => crate::vmm::shareable::supported(ordinal as usize).into(),
        115 => 1, // memory pools (`crate::pool`); 119, the handle types they export: none
        // Cluster launch: a GPU of compute capability 9.0 behind a backend of protocol 12.
        120 => (hopper && d.info.compute_capability.is_some() && d.acc.protocol() >= 12).into(),
        _ => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: u32, out: *mut *const c_char) -> u32 {
    guard("cuGetErrorName", || put(out, describe(error).ok_or(Error::Code(code::INVALID_VALUE))?.0.as_ptr()))
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: u32, out: *mut *const c_char) -> u32 {
    guard("cuGetErrorString", || put(out, describe(error).ok_or(Error::Code(code::INVALID_VALUE))?.1.as_ptr()))
}

/// The name and description of a `CUresult`.
fn describe(error: u32) -> Option<(&'static CStr, &'static CStr)> {
    Some(match error {
        0 => (c"CUDA_SUCCESS", c"no error"),
        1 => (c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
        2 => (c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
        3 => (c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
        4 => (c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
        100 => (c"CUDA_ERROR_NO_DEVICE", c"no CUDA-capable device is detected"),
        101 => (c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
        200 => (c"CUDA_ERROR_INVALID_IMAGE", c"device kernel image is invalid"),
        201 => (c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
        209 => (c"CUDA_ERROR_NO_BINARY_FOR_GPU", c"no kernel image is available for execution on the device"),
        217 => (c"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", c"peer access is not supported between these two devices"),
        400 => (c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
        401 => (c"CUDA_ERROR_ILLEGAL_STATE", c"the operation cannot be performed in the present state"),
        500 => (c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
        600 => (c"CUDA_ERROR_NOT_READY", c"device not ready"),
        700 => (c"CUDA_ERROR_ILLEGAL_ADDRESS", c"an illegal memory access was encountered"),
        705 => (c"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", c"peer access has not been enabled"),
        719 => (c"CUDA_ERROR_LAUNCH_FAILED", c"unspecified launch failure"),
        720 => (c"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", c"too many blocks in cooperative launch"),
        800 => (c"CUDA_ERROR_NOT_PERMITTED", c"operation not permitted"),
        801 => (c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
        900 => (c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", c"operation not permitted when stream is capturing"),
        901 => (c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", c"operation failed due to a previous error during capture"),
        902 => (c"CUDA_ERROR_STREAM_CAPTURE_MERGE", c"operation would result in a merge of separate capture sequences"),
        903 => (c"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", c"capture was not ended in the same stream as it began"),
        904 => (c"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", c"capturing stream has unjoined work"),
        907 => (c"CUDA_ERROR_CAPTURED_EVENT", c"operation not permitted on an event last recorded in a capturing stream"),
        910 => (c"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", c"the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
        912 => (c"CUDA_ERROR_INVALID_CLUSTER_SIZE", c"invalid cluster size"),
        999 => (c"CUDA_ERROR_UNKNOWN", c"unknown error"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bus_id_names_the_slot_whose_location_it_writes() {
        assert_eq!(slot_at("0000:01:00.0"), Some(0));
        assert_eq!(slot_at("00000000:0A:00.0"), Some(9), "NVML's form, upper case");
        assert_eq!(slot_at("02:00.0"), Some(1), "no domain");
        for other in ["0000:00:00.0", "0001:01:00.0", "0000:01:01.0", "0000:01:00.1", "01:00", "gpu", ""] {
            assert_eq!(slot_at(other), None, "{other}");
        }
    }
}
