//! The thin layer over the CUDA driver API (cudarc's `sys`): error translation, handles that
//! may cross threads, and device queries. Everything `unsafe` about the driver is here or in a
//! call site that states why it holds.

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use ac_proto::backend::{ErrorKind, WireError};
use cudarc::driver::sys::{self, CUresult};

use crate::device::DeviceResult;

/// A driver handle (context, stream, event, module, function) that may be used from any
/// thread: the driver allows it once the owning context is current, which every call here
/// ensures first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle<T>(pub T);

// SAFETY: CUDA driver handles are opaque pointers owned by the driver; the driver API is
// thread-safe and a handle is valid on any thread whose current context owns it.
unsafe impl<T> Send for Handle<T> {}
// SAFETY: as above; the handles are never dereferenced on the Rust side.
unsafe impl<T> Sync for Handle<T> {}

/// Whether `libcuda` can be loaded. cudarc panics on the first call when it cannot, so this
/// is asked before any other call.
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// Loads the driver library at `path` for the life of the process, before anything asks for
/// the driver by name: the dynamic loader then answers `libcuda.so` with it (its soname).
pub fn load_from(path: &std::path::Path) -> Result<(), String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading a library runs its initializers; a driver library's are the driver's own.
    let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
        .map_err(|e| format!("cannot load the CUDA driver {}: {e}", path.display()))?;
    std::mem::forget(library); // cudarc keeps using it until the process ends
    Ok(())
}

/// Whether the loaded driver exports `symbol` (newer entry points are missing from older
/// drivers, and cudarc panics when one is called).
pub fn has_symbol(symbol: &str) -> bool {
    // SAFETY: the library is present (checked first); only looks the symbol up.
    driver_present() && unsafe { sys::culib().get::<unsafe extern "C" fn()>(symbol.as_bytes()).is_ok() }
}

/// Errors after which the context is unusable: the kernel faulted, and CUDA keeps returning the
/// error from every later call in that context.
pub fn is_sticky(code: CUresult) -> bool {
    use CUresult::*;
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_CONTEXT_IS_DESTROYED
    )
}

/// The protocol's category for a CUDA error.
pub fn kind_of(code: CUresult) -> ErrorKind {
    use CUresult::*;
    match code {
        _ if is_sticky(code) => ErrorKind::ContextLost,
        CUDA_ERROR_OUT_OF_MEMORY => ErrorKind::OutOfMemory,
        CUDA_ERROR_INVALID_PTX
        | CUDA_ERROR_INVALID_IMAGE
        | CUDA_ERROR_NO_BINARY_FOR_GPU
        | CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        | CUDA_ERROR_JIT_COMPILER_NOT_FOUND
        | CUDA_ERROR_JIT_COMPILATION_DISABLED
        | CUDA_ERROR_INVALID_SOURCE
        | CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
        | CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND => ErrorKind::ModuleLoad,
        CUDA_ERROR_NOT_FOUND => ErrorKind::UnknownKernel,
        CUDA_ERROR_INVALID_VALUE | CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES | CUDA_ERROR_INVALID_HANDLE => {
            ErrorKind::InvalidArgument
        }
        _ => ErrorKind::Device,
    }
}

/// A protocol error naming the CUDA error and the call that returned it, e.g.
/// `cuStreamSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)`.
pub fn wire_error(call: &str, code: CUresult) -> WireError {
    let mut message = format!("{call}: {code:?}");
    if let Some(text) = description(code) {
        message.push_str(&format!(" ({text})"));
    }
    if is_sticky(code) {
        message.push_str("; this session's CUDA context is lost, open a new session");
    }
    WireError::new(kind_of(code), message)
}

/// The driver's own description of an error, when the driver is loaded.
fn description(code: CUresult) -> Option<String> {
    if !driver_present() {
        return None;
    }
    let error = cudarc::driver::result::DriverError(code);
    let text = error.error_string().ok()?.to_string_lossy().into_owned();
    Some(text)
}

/// Turns a driver result into a protocol result naming `call`.
pub fn check(call: &str, code: CUresult) -> DeviceResult<()> {
    match code {
        CUresult::CUDA_SUCCESS => Ok(()),
        code => Err(wire_error(call, code)),
    }
}

/// What `--device cuda` reports when CUDA cannot start.
pub fn init() -> Result<c_int, String> {
    if !driver_present() {
        return Err("libcuda.so was not found: no NVIDIA driver on this host".into());
    }
    // SAFETY: the driver library is present; cuInit may be called any number of times.
    let code = unsafe { sys::cuInit(0) };
    check("cuInit", code).map_err(|e| e.message)?;
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) }).map_err(|e| e.message)?;
    Ok(count)
}

/// Driver calls that may wait (for the GPU, or to pin memory) go through this; it lives in
/// [`crate::device`] because session workers' waits (built without CUDA too) use it as well.
pub use crate::device::blocking;

/// How the driver lets processes share a device (`nvidia-smi -c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputeMode {
    /// Any number of processes and contexts.
    Default,
    /// One process at a time may hold contexts on it: the backend's sessions share it (they
    /// are contexts of one process), nothing else on the host can use it while it runs.
    ExclusiveProcess,
    /// No context may be created: the device is unusable.
    Prohibited,
}

/// The driver's CUDA version as (major, minor), e.g. (12, 8), once `cuInit` has succeeded.
pub fn version() -> Option<(i32, i32)> {
    let mut version = 0;
    // SAFETY: valid out-pointer.
    let code = unsafe { sys::cuDriverGetVersion(&mut version) };
    (code == CUresult::CUDA_SUCCESS).then_some((version / 1000, version % 1000 / 10))
}

/// A device's static description: name, compute capability, total memory, compute mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Properties {
    /// The driver's name for it.
    pub name: String,
    /// Compute capability (major, minor).
    pub capability: (u32, u32),
    /// Total memory, bytes.
    pub memory_total: u64,
    /// Who may create contexts on it.
    pub compute_mode: ComputeMode,
}

/// One of `device`'s attributes (`cuDeviceGetAttribute`).
pub fn attribute(device: sys::CUdevice, attribute: sys::CUdevice_attribute) -> DeviceResult<i32> {
    let mut value = 0;
    // SAFETY: `value` is a valid out-pointer; the driver checks the device.
    check("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device) })?;
    Ok(value)
}

/// Reads a device's properties.
pub fn properties(device: sys::CUdevice) -> DeviceResult<Properties> {
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates it.
    check("cuDeviceGetName", unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, device) })?;
    // SAFETY: NUL-terminated by the driver, inside the buffer.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    let attribute = |which| attribute(device, which).map(|value| value as u32);
    let major = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let mut total = 0usize;
    // SAFETY: `total` is a valid out-pointer.
    check("cuDeviceTotalMem", unsafe { sys::cuDeviceTotalMem_v2(&mut total, device) })?;
    let compute_mode = match attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)? {
        2 => ComputeMode::Prohibited,
        3 => ComputeMode::ExclusiveProcess,
        _ => ComputeMode::Default,
    };
    Ok(Properties { name, capability: (major, minor), memory_total: total as u64, compute_mode })
}

/// The device of CUDA ordinal `ordinal` (no context is made).
pub fn device(ordinal: u32) -> DeviceResult<sys::CUdevice> {
    let mut device = 0;
    // SAFETY: valid out-pointer; cuInit has succeeded (`init`).
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal as c_int) })?;
    Ok(device)
}

/// Makes `context` current on the calling thread.
pub fn bind(context: Handle<sys::CUcontext>) -> DeviceResult<()> {
    // SAFETY: the context is alive (its owner outlives every call that binds it).
    check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(context.0) })
}

/// Free memory of the device of the current context, bytes.
pub fn memory_free() -> DeviceResult<u64> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers; a context is current.
    check("cuMemGetInfo", unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
    Ok(free as u64)
}

/// The driver's entry point `symbol` (NUL-terminated), typed `F` (looked up once a process:
/// the callers keep it), or why the driver has none.
pub fn entry_point<F: Copy>(symbol: &[u8]) -> DeviceResult<F> {
    let name = String::from_utf8_lossy(&symbol[..symbol.len() - 1]).into_owned();
    if !has_symbol(&name) {
        return Err(WireError::new(ErrorKind::NeedsCuda, format!("this GPU's driver has no {name}")));
    }
    // SAFETY: the symbol is the driver's function of the type `F` declares (cuda.h's, with its
    // enumerations as 32-bit integers, as the C ABI passes them).
    unsafe { sys::culib().get::<F>(symbol).map(|f| *f) }
        .map_err(|e| WireError::new(ErrorKind::NeedsCuda, format!("{name}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_cuda_error_and_the_call() {
        let e = wire_error("cuStreamSynchronize", CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(e.kind, ErrorKind::ContextLost);
        assert!(e.message.starts_with("cuStreamSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS"), "{}", e.message);
        let e = wire_error("cuMemAlloc", CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(e.kind, ErrorKind::OutOfMemory);
        assert!(e.message.contains("CUDA_ERROR_OUT_OF_MEMORY") && !e.message.contains("lost"));
        assert_eq!(kind_of(CUresult::CUDA_ERROR_INVALID_PTX), ErrorKind::ModuleLoad);
        assert_eq!(kind_of(CUresult::CUDA_ERROR_NOT_FOUND), ErrorKind::UnknownKernel);
        assert_eq!(kind_of(CUresult::CUDA_ERROR_LAUNCH_FAILED), ErrorKind::ContextLost);
        assert!(check("cuInit", CUresult::CUDA_SUCCESS).is_ok());
    }
}
