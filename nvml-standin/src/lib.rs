//! A stand-in for NVML, the NVIDIA Management Library (`libnvidia-ml.so.1`), for tests only: the
//! backend's tests load it by path (`nvml_wrapper::Nvml::builder().lib_path(..)`) in place of
//! the driver's library. It is never installed or shipped, and it is **not a GPU**: it answers
//! from a machine the test describes, so that CI can check the backend's inventory, health and
//! event handling against NVML's documented contract. `scripts/gpu-check` on real hardware stays
//! the judge.
//!
//! What it models:
//! - **the machine**, from the TOML file `NVML_STANDIN_STATE` names (format in `state.rs`:
//!   GPUs with UUID, name, PCI bus id, memory, compute mode, compute capability, MIG mode and
//!   MIG instances, "lost", pending page retirement, ECC totals, PCIe replays, and sensor
//!   readings: utilization, the die's temperature, power and its limits, energy, clocks and
//!   their maxima, performance state, each absent where the GPU's NVML gives none: `sensors.rs`,
//!   which answers none for a MIG instance). Without the
//!   variable, or with a file that cannot be read, `nvmlInit` answers
//!   `NVML_ERROR_DRIVER_NOT_LOADED`, as NVML on a host without the driver; a file that does not
//!   parse answers `NVML_ERROR_UNKNOWN` and says why on stderr;
//! - **changes while running**: the file is read again on any call after its modification time,
//!   length or inode changed (write a new file beside it and rename it over: a rename is always
//!   seen, and a reader never sees half a file; a version that does not parse keeps the last good
//!   one). Handles stand for UUIDs and live as long as the process: a device a rewrite removed,
//!   or a GPU marked `lost` (and its MIG instances), answers `NVML_ERROR_GPU_IS_LOST`;
//! - **MIG** as NVML presents it: instances exist only while the GPU's MIG mode is on, are
//!   devices of their own (UUID, name, memory) found through their parent
//!   (`nvmlDeviceGetMigDeviceHandleByIndex`) or by UUID, and answer PCI info and compute
//!   capability with the parent's;
//! - **critical Xid events**, from the text file `NVML_STANDIN_EVENTS` names, to which the test
//!   appends lines `<uuid> xid <number>`. Each event set reads the lines appended after it was
//!   created, in order, and reports those for devices registered on it for
//!   `nvmlEventTypeXidCriticalError`: an instance's line goes to the instance if registered, else
//!   to its parent GPU, with the instance's GPU and compute instance ids (`0xFFFFFFFF` for a
//!   GPU's own). `nvmlEventSetWait_v2` looks every 10 ms until its timeout;
//! - the calling contract: `nvmlInit`/`nvmlShutdown` counted, nothing but the version and error
//!   strings answers before `nvmlInit`; null pointers are `NVML_ERROR_INVALID_ARGUMENT`, short
//!   string buffers `NVML_ERROR_INSUFFICIENT_SIZE`, a `nvmlMemory_v2_t` without its version
//!   `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`, an unsupported event type `NVML_ERROR_NOT_SUPPORTED`.
//!
//! Where NVML's reference leaves the behaviour open, the stand-in takes the choice least kind to
//! the caller: on a MIG instance handle the index, compute mode, MIG mode and health queries
//! (retired pages, ECC, PCIe replays) answer `NVML_ERROR_NOT_SUPPORTED` (ask the parent GPU); a
//! GPU without a `mig` key answers `NVML_ERROR_NOT_SUPPORTED` to the MIG queries, as one without
//! MIG does; `nvmlDeviceGetHandleByIndex_v2` on a lost GPU answers `NVML_ERROR_GPU_IS_LOST`.
//!
//! What it does not model: everything else NVML has (processes, fans, NVLink, vGPU, setters:
//! those symbols are absent, so nvml-wrapper answers
//! `FailedToLoadSymbol`), events other than critical Xids (ECC events are listed as supported
//! but never sent), reserved memory (always 0), and timing: a GPU does not fall off the bus
//! on its own.
//!
//! Debugging and tests: `standin_nvml_calls()` counts the NVML calls served.

// An FFI test fixture: it exports C functions that take raw pointers from their caller, as NVML
// does. Every pointer is checked for null and then written as NVML's header says.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)] // the safety contract is NVML's

mod events;
mod library;
mod sensors;
mod state;

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nvml_wrapper_sys::bindings::*;

pub use library::{Code, Library};

/// Why a state file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{} is not a state file: {source}", path.display())]
    Parse { path: PathBuf, source: Box<toml::de::Error> },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
}

/// The environment variable naming the state file.
pub const STATE_ENV: &str = "NVML_STANDIN_STATE";
/// The environment variable naming the events file.
pub const EVENTS_ENV: &str = "NVML_STANDIN_EVENTS";

/// How often `nvmlEventSetWait_v2` looks at the events file.
const POLL: Duration = Duration::from_millis(10);

static LIBRARY: LazyLock<Mutex<Library>> = LazyLock::new(|| Mutex::new(Library::default()));
static CALLS: AtomicU64 = AtomicU64::new(0);

/// The library, for one NVML call: counted, then locked.
fn enter() -> MutexGuard<'static, Library> {
    CALLS.fetch_add(1, Ordering::Relaxed);
    lock()
}

fn lock() -> MutexGuard<'static, Library> {
    LIBRARY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn code(result: Result<(), Code>) -> nvmlReturn_t {
    result.err().unwrap_or(nvmlReturn_enum_NVML_SUCCESS)
}

/// Writes a call's value through its out pointer.
unsafe fn put<T>(out: *mut T, value: Result<T, Code>) -> nvmlReturn_t {
    if out.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    code(value.map(|value| out.write(value)))
}

/// Writes a string and its NUL into a caller's buffer of `length` bytes.
unsafe fn put_str(buffer: *mut c_char, length: c_uint, text: Result<String, Code>) -> nvmlReturn_t {
    if buffer.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let text = match text {
        Ok(text) => text,
        Err(code) => return code,
    };
    if (length as usize) < text.len() + 1 {
        return nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buffer, text.len());
    buffer.add(text.len()).write(0);
    nvmlReturn_enum_NVML_SUCCESS
}

fn handle(device: nvmlDevice_t) -> usize {
    device as usize
}

fn device(handle: usize) -> nvmlDevice_t {
    handle as nvmlDevice_t
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from)
}

// ---- Initialisation and the system ----

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    let state = env_path(STATE_ENV);
    code(enter().init(state.as_deref(), env_path(EVENTS_ENV)))
}

/// The flags (no GPUs, no attach) change nothing here: the machine is the file's.
#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    let state = env_path(STATE_ENV);
    code(enter().init(state.as_deref(), env_path(EVENTS_ENV)))
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    code(enter().shutdown())
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    CALLS.fetch_add(1, Ordering::Relaxed);
    error_string(result).as_ptr()
}

/// NVML's own wording for each code.
#[allow(non_upper_case_globals)] // the C header's names
fn error_string(result: nvmlReturn_t) -> &'static CStr {
    match result {
        nvmlReturn_enum_NVML_SUCCESS => c"Success",
        nvmlReturn_enum_NVML_ERROR_UNINITIALIZED => c"Uninitialized",
        nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => c"Not Supported",
        nvmlReturn_enum_NVML_ERROR_NO_PERMISSION => c"Insufficient Permissions",
        nvmlReturn_enum_NVML_ERROR_ALREADY_INITIALIZED => c"Already Initialized",
        nvmlReturn_enum_NVML_ERROR_NOT_FOUND => c"Not Found",
        nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        nvmlReturn_enum_NVML_ERROR_TIMEOUT => c"Timeout",
        nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => c"GPU is lost",
        nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH => c"Argument version mismatch",
        _ => c"Unknown Error",
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    let value = enter().driver_version();
    put_str(version, length, value)
}

/// `12.<driver version>`, NVML's form; answers before `nvmlInit` too, as NVML does.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    let mut library = enter();
    let driver = library.driver_version().unwrap_or_else(|_| "580.00.01".to_owned());
    put_str(version, length, Ok(format!("12.{driver}")))
}

// ---- Devices ----

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    let value = enter().count();
    put(count, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, out: *mut nvmlDevice_t) -> nvmlReturn_t {
    let value = enter().by_index(index).map(device);
    put(out, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, out: *mut nvmlDevice_t) -> nvmlReturn_t {
    if uuid.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let uuid = CStr::from_ptr(uuid).to_string_lossy();
    let value = enter().by_uuid(&uuid).map(device);
    put(out, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(dev: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    let value = enter().index(handle(dev));
    put(index, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(dev: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> nvmlReturn_t {
    let value = enter().uuid(handle(dev));
    put_str(uuid, length, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(dev: nvmlDevice_t, name: *mut c_char, length: c_uint) -> nvmlReturn_t {
    let value = enter().name(handle(dev));
    put_str(name, length, value)
}

/// Device and subsystem ids of an H100 SXM5 (`0x2330`, vendor `0x10DE`), for every GPU.
const PCI_DEVICE_ID: c_uint = 0x2330_10DE;
const PCI_SUBSYSTEM_ID: c_uint = 0x16C1_10DE;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(dev: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    let value = enter().pci(handle(dev)).map(|(address, bus_id)| {
        // SAFETY: a C struct of integers and byte arrays, for which zero is a valid value.
        let mut info: nvmlPciInfo_t = std::mem::zeroed();
        info.domain = address.domain;
        info.bus = address.bus;
        info.device = address.device;
        info.pciDeviceId = PCI_DEVICE_ID;
        info.pciSubSystemId = PCI_SUBSYSTEM_ID;
        copy_c(&mut info.busId, &bus_id);
        // The legacy form has a 4-digit domain: `0000:17:00.0`.
        copy_c(&mut info.busIdLegacy, &bus_id[4..]);
        info
    });
    put(pci, value)
}

/// Copies `text` and a NUL into a fixed C array (the state file's check keeps it short enough).
fn copy_c<const N: usize>(array: &mut [c_char; N], text: &str) {
    for (slot, byte) in array.iter_mut().zip(text.bytes().take(N - 1)) {
        *slot = byte as c_char;
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(dev: nvmlDevice_t, memory: *mut nvmlMemory_t) -> nvmlReturn_t {
    let value = enter().memory(handle(dev)).map(|(total, used)| nvmlMemory_t { total, free: total - used, used });
    put(memory, value)
}

/// `nvmlMemory_v2`: `NVML_STRUCT_VERSION(Memory, 2)`, as the header defines it.
const MEMORY_V2: c_uint = std::mem::size_of::<nvmlMemory_v2_t>() as c_uint | 2 << 24;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(dev: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    if memory.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    if (*memory).version != MEMORY_V2 {
        return nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    let value = enter().memory(handle(dev)).map(|(total, used)| nvmlMemory_v2_t {
        version: MEMORY_V2,
        total,
        reserved: 0,
        free: total - used,
        used,
    });
    put(memory, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(dev: nvmlDevice_t, mode: *mut nvmlComputeMode_t) -> nvmlReturn_t {
    let value = enter().compute_mode(handle(dev));
    put(mode, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    dev: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
    if major.is_null() || minor.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let value = enter().capability(handle(dev));
    code(value.map(|[ma, mi]| {
        major.write(ma);
        minor.write(mi);
    }))
}

// ---- MIG ----

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    dev: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    if current.is_null() || pending.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let value = enter().mig_mode(handle(dev));
    code(value.map(|mode| {
        current.write(mode);
        pending.write(mode);
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(dev: nvmlDevice_t, count: *mut c_uint) -> nvmlReturn_t {
    let value = enter().max_mig_devices(handle(dev));
    put(count, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    dev: nvmlDevice_t,
    index: c_uint,
    mig: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let value = enter().mig_device_by_index(handle(dev), index).map(device);
    put(mig, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(dev: nvmlDevice_t, is_mig: *mut c_uint) -> nvmlReturn_t {
    let value = enter().is_mig_device(handle(dev)).map(c_uint::from);
    put(is_mig, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig: nvmlDevice_t,
    parent: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let value = enter().mig_parent(handle(mig)).map(device);
    put(parent, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(dev: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    let value = enter().instance_ids(handle(dev)).map(|(gpu_instance, _)| gpu_instance);
    put(id, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(dev: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    let value = enter().instance_ids(handle(dev)).map(|(_, compute_instance)| compute_instance);
    put(id, value)
}

// ---- Health ----

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    dev: nvmlDevice_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    let value = enter().retired_pages_pending(handle(dev)).map(|pending| {
        if pending {
            nvmlEnableState_enum_NVML_FEATURE_ENABLED
        } else {
            nvmlEnableState_enum_NVML_FEATURE_DISABLED
        }
    });
    put(pending, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    dev: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    counter: nvmlEccCounterType_t,
    count: *mut c_ulonglong,
) -> nvmlReturn_t {
    let value = enter().total_ecc_errors(handle(dev), error_type, counter);
    put(count, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieReplayCounter(dev: nvmlDevice_t, value: *mut c_uint) -> nvmlReturn_t {
    let replays = enter().pcie_replays(handle(dev));
    put(value, replays)
}

// ---- Events ----

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(dev: nvmlDevice_t, types: *mut c_ulonglong) -> nvmlReturn_t {
    let value = enter().supported_events(handle(dev));
    put(types, value)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    let value = enter().create_set().map(|id| id as nvmlEventSet_t);
    put(set, value)
}

#[no_mangle]
pub extern "C" fn nvmlDeviceRegisterEvents(dev: nvmlDevice_t, types: c_ulonglong, set: nvmlEventSet_t) -> nvmlReturn_t {
    code(enter().register(handle(dev), types, set as usize))
}

#[no_mangle]
pub extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    code(enter().free_set(set as usize))
}

/// Looks at the events file every 10 ms, without holding the library between looks, so that
/// other threads' calls go on while one waits.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeout_ms: c_uint,
) -> nvmlReturn_t {
    CALLS.fetch_add(1, Ordering::Relaxed);
    if data.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
    loop {
        let polled = lock().poll(set as usize);
        match polled {
            Err(code) => return code,
            Ok(Some(event)) => {
                data.write(nvmlEventData_t {
                    device: device(event.device),
                    eventType: c_ulonglong::from(nvmlEventTypeXidCriticalError),
                    eventData: event.xid,
                    gpuInstanceId: event.gpu_instance,
                    computeInstanceId: event.compute_instance,
                });
                return nvmlReturn_enum_NVML_SUCCESS;
            }
            Ok(None) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return nvmlReturn_enum_NVML_ERROR_TIMEOUT;
        }
        std::thread::sleep(POLL.min(deadline - now));
    }
}

// ---- For tests ----

/// The number of NVML calls this library has served, so that a test can see that the backend
/// really asked (or stopped asking).
#[no_mangle]
pub extern "C" fn standin_nvml_calls() -> u64 {
    CALLS.load(Ordering::Relaxed)
}

/// For the unit tests: the path in the temporary directory a test's file lives at.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    pub(crate) fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("nvml-standin-{}-{name}", std::process::id()))
    }

    const ONE_GPU: &str = r#"
        [[gpu]]
        uuid = "GPU-11111111-2222-3333-4444-555555555555"
        name = "NVIDIA H100 80GB HBM3"
        pci_bus_id = "00000000:17:00.0"
        memory_mib = 81559
    "#;

    fn string(buffer: &[c_char]) -> String {
        // SAFETY: the buffer is NUL-terminated by the call that filled it.
        unsafe { CStr::from_ptr(buffer.as_ptr()) }.to_string_lossy().into_owned()
    }

    /// The only test that uses the process's library and its environment variables: the C
    /// functions move what the model answers across the boundary, as NVML's header says.
    #[test]
    fn the_c_functions_follow_the_header() {
        let (state, events) = (temp_path("c.toml"), temp_path("c.events"));
        std::fs::write(&state, ONE_GPU).unwrap();
        std::env::remove_var(STATE_ENV);
        assert_eq!(nvmlInit_v2(), nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED);
        std::env::set_var(STATE_ENV, &state);
        std::env::set_var(EVENTS_ENV, &events);
        let calls = standin_nvml_calls();
        assert_eq!(nvmlInit_v2(), nvmlReturn_enum_NVML_SUCCESS);
        unsafe {
            let mut count = 0;
            assert_eq!(nvmlDeviceGetCount_v2(&mut count), nvmlReturn_enum_NVML_SUCCESS);
            assert_eq!(count, 1);
            assert_eq!(nvmlDeviceGetCount_v2(std::ptr::null_mut()), nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
            let mut dev = std::ptr::null_mut();
            assert_eq!(nvmlDeviceGetHandleByIndex_v2(0, &mut dev), nvmlReturn_enum_NVML_SUCCESS);
            assert!(!dev.is_null());

            let mut name = [0 as c_char; 96];
            assert_eq!(nvmlDeviceGetName(dev, name.as_mut_ptr(), 21), nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE);
            assert_eq!(nvmlDeviceGetName(dev, name.as_mut_ptr(), 22), nvmlReturn_enum_NVML_SUCCESS);
            assert_eq!(string(&name), "NVIDIA H100 80GB HBM3");

            let mut pci: nvmlPciInfo_t = std::mem::zeroed();
            assert_eq!(nvmlDeviceGetPciInfo_v3(dev, &mut pci), nvmlReturn_enum_NVML_SUCCESS);
            assert_eq!(
                (string(&pci.busId), string(&pci.busIdLegacy)),
                ("00000000:17:00.0".into(), "0000:17:00.0".into())
            );
            assert_eq!((pci.domain, pci.bus, pci.device), (0, 0x17, 0));

            let mut memory: nvmlMemory_v2_t = std::mem::zeroed();
            assert_eq!(
                nvmlDeviceGetMemoryInfo_v2(dev, &mut memory),
                nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            );
            memory.version = MEMORY_V2;
            assert_eq!(nvmlDeviceGetMemoryInfo_v2(dev, &mut memory), nvmlReturn_enum_NVML_SUCCESS);
            assert_eq!((memory.total, memory.free, memory.used), (81559 << 20, 81559 << 20, 0));

            let mut set = std::ptr::null_mut();
            assert_eq!(nvmlEventSetCreate(&mut set), nvmlReturn_enum_NVML_SUCCESS);
            let xid = c_ulonglong::from(nvmlEventTypeXidCriticalError);
            assert_eq!(nvmlDeviceRegisterEvents(dev, xid, set), nvmlReturn_enum_NVML_SUCCESS);
            let mut data: nvmlEventData_t = std::mem::zeroed();
            assert_eq!(nvmlEventSetWait_v2(set, &mut data, 0), nvmlReturn_enum_NVML_ERROR_TIMEOUT);
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&events).unwrap();
            writeln!(file, "GPU-11111111-2222-3333-4444-555555555555 xid 79").unwrap();
            assert_eq!(nvmlEventSetWait_v2(set, &mut data, 5000), nvmlReturn_enum_NVML_SUCCESS);
            assert_eq!((data.device, data.eventType, data.eventData), (dev, xid, 79));
            assert_eq!((data.gpuInstanceId, data.computeInstanceId), (0xFFFF_FFFF, 0xFFFF_FFFF));
            assert_eq!(nvmlEventSetFree(set), nvmlReturn_enum_NVML_SUCCESS);

            assert_eq!(CStr::from_ptr(nvmlErrorString(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST)), c"GPU is lost");
        }
        assert!(standin_nvml_calls() >= calls + 14, "every call is counted");
        assert_eq!(nvmlShutdown(), nvmlReturn_enum_NVML_SUCCESS);
        assert_eq!(nvmlShutdown(), nvmlReturn_enum_NVML_ERROR_UNINITIALIZED);
        std::fs::remove_file(state).unwrap();
        std::fs::remove_file(events).unwrap();
    }
}
