//! A stand-in for the CUDA driver library, for tests only: it is loaded in place of
//! `libcuda.so` by the stand-in tests (`tests/tests/e2e/device_contract.rs`), and never installed
//! or shipped. It is **not a GPU** and says nothing about one: it checks the backend's CUDA code
//! against the driver API's documented contract instead of assuming it, and runs the builtin
//! kernels on the CPU from their CUDA source (`kernels.cu`, compiled for the host: [`host`]).
//! `scripts/gpu-check` on real hardware stays the judge.
//!
//! What it enforces (each breach is an error code, and where the real driver would not
//! report it, a recorded violation that the tests read through `standin_violations`):
//! - a context must be current on the calling thread for every call that works in one;
//! - handles belong to one context and die with it; functions die with their module;
//! - streams run in order, events complete when the work before their record has run, and
//!   queued work runs as late as allowed: a host-to-device copy reads host memory only when
//!   waited for, from pageable and pinned memory alike (device-to-host into pageable memory
//!   completes before the call returns, as documented);
//! - a kernel computes on the thread that waits for it with the lock released (a fixture takes
//!   it for each load and store; a builtin holds the allocations its pointers reach, and one
//!   that writes past an allocation's end faults), as a GPU runs kernels while the host's
//!   other calls return at once: a thread that waits for a long kernel holds up no other
//!   thread's launch, copy or allocation, and whoever else waits for that stream waits for the
//!   kernel (`state::run`);
//! - pinned host allocations are tracked: freeing one that queued work still uses, or leaving
//!   one allocated when its context goes, is a violation;
//! - new device memory holds stale bytes (`0xFF`: NaN as floats), not zeros, as on a GPU;
//! - what kernels print (the `greet` fixture's `printf`) goes into their context's printf
//!   buffer, up to its size (`cuCtxSetLimit`, 1 MiB by default; the rest is dropped), and is
//!   written to standard output at a synchronization or the context's destruction, as the
//!   driver does; context limits are kept per context ([`limits`]);
//! - a launch's arguments are read as the kernel's signature says (count and sizes), so the
//!   backend must check them first; a kernel runs only the threads its grid and block launch
//!   (the builtin kernels' grid-stride loops, and the `add_one` fixture's one element a
//!   thread); other kernels answer `CUDA_ERROR_NOT_SUPPORTED`, and `illegal_store` faults
//!   (`CUDA_ERROR_ILLEGAL_ADDRESS`, sticky for every context of the process, as on an H100) so
//!   that tests can inject a fault into one session;
//! - a test can make one host-to-device DMA fault halfway through a bulk copy
//!   (`standin_fail_host_to_device_after`, or for a stand-in another process loads, a session
//!   worker's, the environment variable `CUDA_STANDIN_FAIL_HOST_TO_DEVICE_AFTER` it inherits),
//!   which no real driver does on demand. As a real DMA fault, it arrives when the copy runs,
//!   after the call that queued it returned success, and loses the context (sticky);
//! - violations are also appended to the file `CUDA_STANDIN_VIOLATIONS` names, when set, so
//!   that a test sees those of every process that loaded the stand-in (session workers too);
//! - each host-to-device and device-to-host copy takes `CUDA_STANDIN_COPY_DELAY_MS`
//!   milliseconds when it runs, when set (the thread sleeps: a slow device that burns no CPU),
//!   so that a test keeps session workers' copies in flight for seconds;
//! - `cuInit` fails with the code `CUDA_STANDIN_INIT_ERROR` names, when set (802
//!   `CUDA_ERROR_SYSTEM_NOT_READY`, the fabric manager not ready, or 999 `CUDA_ERROR_UNKNOWN`,
//!   as with `/dev/nvidia-uvm` missing), for a test of a daemon whose driver does not start;
//! - module images must be 8-byte aligned (nvcc's own embedding) and are read as cubin (ELF),
//!   PTX, or a fat binary as nvcc embeds it, from which the load takes the uncompressed cubin
//!   for sm_90, else uncompressed PTX; a fatbin whose image for the device is compressed
//!   (nvcc 13 compresses PTX by default) answers `CUDA_ERROR_NOT_SUPPORTED`, one without an
//!   image for the device `CUDA_ERROR_NO_BINARY_FOR_GPU`. A cubin need not hold a kernel
//!   (nvlink emits such modules); PTX must.
//!
//! It has two devices (compute capability 9.0, 4 GiB each, taken from host memory as used: see
//! [`vmm`] for physical memory). Calls follow the CUDA driver API reference; where it leaves a
//! choice, the stand-in takes the one least kind to the caller.

// An FFI test fixture: it exports C functions that take raw pointers from their caller, as the
// driver does. Every unsafe block states what the contract promises.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)] // the safety contract is the CUDA driver API's

mod attributes;
mod clusters;
mod code;
mod cooperative;
mod elf;
mod fixtures;
mod host;
mod ipc;
mod kernels;
mod limits;
mod linker;
mod listing;
mod memory;
mod run;
mod shareable;
mod space;
mod state;
mod streams;
mod tensor_maps;
mod textures;
mod vmm;

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::LazyLock;

use parking_lot::Mutex;
use state::{Driver, Function, Guard, Module, Op};

static DRIVER: LazyLock<Mutex<Driver>> = LazyLock::new(|| Mutex::new(Driver::from_env()));

thread_local! {
    /// The context current on this thread (0: none).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

pub(crate) fn driver() -> Guard<'static> {
    DRIVER.lock()
}

pub(crate) type Handle = *mut c_void;

pub(crate) fn id(handle: Handle) -> u64 {
    handle as u64
}

fn handle(id: u64) -> Handle {
    id as Handle
}

/// The current context, alive and not lost; records a violation when there is none.
fn current(d: &mut Driver, call: &str) -> Result<u64, u32> {
    let context = CURRENT.with(Cell::get);
    if context == 0 {
        d.violation(format!("{call} without a current context on this thread"));
        return Err(code::INVALID_CONTEXT);
    }
    d.usable(context).map(|_| context)
}

/// Runs `body` with the lock and the current context; its error is the call's result.
pub(crate) fn with_context(call: &str, body: impl FnOnce(&mut Guard<'static>, u64) -> Result<(), u32>) -> u32 {
    let mut d = driver();
    match current(&mut d, call).and_then(|context| body(&mut d, context)) {
        Ok(()) => code::SUCCESS,
        Err(code) => code,
    }
}

/// Checks that a handle lives and belongs to `context`, recording a violation if not.
pub(crate) fn owned(d: &mut Driver, what: &str, owner: Option<u64>, context: u64) -> Result<(), u32> {
    match owner {
        Some(owner) if owner == context => Ok(()),
        Some(_) => {
            d.violation(format!("{what} of another context used"));
            Err(code::INVALID_HANDLE)
        }
        None => {
            d.violation(format!("dead or unknown {what} used"));
            Err(code::INVALID_HANDLE)
        }
    }
}

// ---- Initialisation and devices ----

#[no_mangle]
pub extern "C" fn cuInit(_flags: c_uint) -> u32 {
    let mut d = driver();
    if let Some(error) = d.init_error {
        return error;
    }
    d.initialized = true;
    code::SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> u32 {
    // A driver with cuFuncGetParamInfo is CUDA 12.4 or newer.
    *version = if driver().no_param_info { 12030 } else { 12080 };
    code::SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> u32 {
    if !driver().initialized {
        return code::NOT_INITIALIZED;
    }
    *count = state::DEVICES;
    code::SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> u32 {
    if !(0..state::DEVICES).contains(&ordinal) {
        return code::INVALID_DEVICE;
    }
    *device = ordinal;
    code::SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> u32 {
    if !(0..state::DEVICES).contains(&device) || len <= 0 {
        return code::INVALID_VALUE;
    }
    let text = format!("CUDA driver stand-in {device} (not a GPU)\0");
    let n = text.len().min(len as usize);
    std::ptr::copy_nonoverlapping(text.as_ptr() as *const c_char, name, n);
    *name.add(n - 1) = 0;
    code::SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: c_int) -> u32 {
    if !(0..state::DEVICES).contains(&device) {
        return code::INVALID_DEVICE;
    }
    *value = match attribute {
        8 => state::DEFAULT_SHARED as c_int,              // shared memory per block
        16 => state::MULTIPROCESSORS as c_int,            // multiprocessors
        39 => state::THREADS_PER_MULTIPROCESSOR as c_int, // threads a multiprocessor holds
        75 => state::COMPUTE_CAPABILITY.0 as c_int,       // compute capability major
        76 => state::COMPUTE_CAPABILITY.1 as c_int,       // minor
        97 => state::OPTIN_SHARED as c_int,               // shared memory per block, opted in
        103 => 1,                                         // POSIX descriptors of physical memory
        _ => 0,                                           // compute mode DEFAULT, and the rest
    };
    code::SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: c_int) -> u32 {
    if !(0..state::DEVICES).contains(&device) {
        return code::INVALID_DEVICE;
    }
    *bytes = state::DEVICE_MEMORY as usize;
    code::SUCCESS
}

// ---- Contexts ----

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(context: *mut Handle, device: c_int) -> u32 {
    let mut d = driver();
    if let Some(&primary) = d.primaries.get(&device) {
        if let Some(refs) = d.contexts.get_mut(&primary).and_then(|c| c.primary_refs.as_mut()) {
            *refs += 1;
            *context = handle(primary);
            return code::SUCCESS;
        }
    }
    match d.create_context(device, true) {
        Ok(primary) => {
            d.primaries.insert(device, primary);
            *context = handle(primary);
            code::SUCCESS
        }
        Err(code) => code,
    }
}

/// Scheduling flags change nothing here (nothing spins); the device must exist.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(device: c_int, _flags: c_uint) -> u32 {
    match (0..state::DEVICES).contains(&device) {
        true => code::SUCCESS,
        false => code::INVALID_DEVICE,
    }
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> u32 {
    let mut d = driver();
    let Some(&primary) = d.primaries.get(&device) else { return code::INVALID_CONTEXT };
    let refs = d.contexts.get_mut(&primary).and_then(|c| c.primary_refs.as_mut()).expect("primary context");
    *refs -= 1;
    if *refs > 0 {
        return code::SUCCESS;
    }
    let leaked = d.pinned.values().filter(|(_, owner)| *owner == primary).count();
    if leaked > 0 {
        d.violation(format!("{leaked} pinned host allocations still allocated when their context was released"));
    }
    d.pinned.retain(|_, (_, owner)| *owner != primary);
    d.primaries.remove(&device);
    run::destroy_context(&mut d, primary).err().unwrap_or(code::SUCCESS)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(context: *mut Handle, _flags: c_uint, device: c_int) -> u32 {
    match driver().create_context(device, false) {
        Ok(id) => {
            CURRENT.with(|c| c.set(id));
            *context = handle(id);
            code::SUCCESS
        }
        Err(code) => code,
    }
}

#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(context: Handle) -> u32 {
    let mut d = driver();
    let leaked = d.pinned.values().filter(|(_, owner)| *owner == id(context)).count();
    if leaked > 0 {
        d.violation(format!("{leaked} pinned host allocations still allocated when their context was destroyed"));
    }
    match run::destroy_context(&mut d, id(context)) {
        Ok(()) => {
            CURRENT.with(|c| {
                if c.get() == id(context) {
                    c.set(0)
                }
            });
            code::SUCCESS
        }
        Err(code) => code,
    }
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(context: Handle) -> u32 {
    if !context.is_null() && !driver().contexts.contains_key(&id(context)) {
        return code::INVALID_CONTEXT;
    }
    CURRENT.with(|c| c.set(id(context)));
    code::SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> u32 {
    cuModuleLoadDataEx(module, image, 0, std::ptr::null_mut(), std::ptr::null_mut())
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut Handle,
    image: *const c_void,
    count: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> u32 {
    with_context("cuModuleLoadData", |d, context| {
        if image.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let start = image as *const u8;
        let magic = std::slice::from_raw_parts(start, 4);
        let fatbin = magic == kernels::FATBIN_MAGIC.to_le_bytes();
        if (magic == b"\x7fELF" || fatbin) && (image as usize) & 7 != 0 {
            d.violation(format!("module image at {image:p}: not 8-byte aligned"));
            return Err(code::INVALID_IMAGE);
        }
        // The image's own headers give its length, as the driver reads them.
        let image = if fatbin {
            let len = kernels::fatbin_len(std::slice::from_raw_parts(start, 16)).ok_or(code::INVALID_IMAGE)?;
            let (arch, minor) = state::COMPUTE_CAPABILITY;
            kernels::fatbin_image(std::slice::from_raw_parts(start, len), arch * 10 + minor)?
        } else if magic == b"\x7fELF" {
            let table = elf::table_end(std::slice::from_raw_parts(start, 64)).ok_or(code::INVALID_IMAGE)?;
            let len = elf::len(std::slice::from_raw_parts(start, table)).ok_or(code::INVALID_IMAGE)?;
            std::slice::from_raw_parts(start, len)
        } else {
            CStr::from_ptr(image as *const c_char).to_bytes()
        };
        // A cubin without kernels is a legal module; PTX without an entry is taken for text
        // that is not PTX.
        let cubin = image.starts_with(b"\x7fELF");
        let kernels = kernels::names(image).filter(|n| cubin || !n.is_empty()).ok_or(code::INVALID_IMAGE)?;
        linker::resolved_alone(image, (count, options, values))?;
        // A cubin's variables are allocated with it (PTX's are not read: its modules hold none).
        let declared = if cubin { elf::variables(image).ok_or(code::INVALID_IMAGE)? } else { Vec::new() };
        let variables = d.place_variables(context, declared)?;
        let shared = if cubin { elf::static_shared(image).ok_or(code::INVALID_IMAGE)? } else { Vec::new() };
        let static_shared =
            shared.into_iter().map(|(name, bytes)| (name, bytes.min(u32::MAX as usize) as u32)).collect();
        let id = d.handle();
        d.modules.insert(id, Module { context, kernels, variables, static_shared });
        *module = handle(id);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(module: Handle) -> u32 {
    with_context("cuModuleUnload", |d, context| {
        let owner = d.modules.get(&id(module)).map(|m| m.context);
        owned(d, "module", owner, context)?;
        let unloaded = d.modules.remove(&id(module)).expect("owned above");
        d.functions.retain(|_, f| f.module != id(module));
        // Its variables go with it, at once: work still queued that touches one faults.
        unloaded.variables.holdings.iter().for_each(|&address| d.release(address));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    address: *mut u64,
    bytes: *mut usize,
    module: Handle,
    name: *const c_char,
) -> u32 {
    with_context("cuModuleGetGlobal", |d, context| {
        let owner = d.modules.get(&id(module)).map(|m| m.context);
        owned(d, "module", owner, context)?;
        if name.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let name = CStr::from_ptr(name).to_string_lossy();
        let &(at, size) = d.modules[&id(module)].variables.variables.get(name.as_ref()).ok_or(code::NOT_FOUND)?;
        if !address.is_null() {
            *address = at;
        }
        if !bytes.is_null() {
            *bytes = size;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(function: *mut Handle, module: Handle, name: *const c_char) -> u32 {
    with_context("cuModuleGetFunction", |d, context| {
        let owner = d.modules.get(&id(module)).map(|m| m.context);
        owned(d, "module", owner, context)?;
        let name = CStr::from_ptr(name).to_string_lossy().into_owned();
        if !d.modules[&id(module)].kernels.contains(&name) {
            return Err(code::NOT_FOUND);
        }
        let static_shared = d.modules[&id(module)].static_shared.get(&name).copied().unwrap_or(0);
        let max_dynamic_shared = state::DEFAULT_SHARED.saturating_sub(static_shared);
        let f = d.handle();
        let record = Function {
            context,
            module: id(module),
            name,
            static_shared,
            max_dynamic_shared,
            carveout: -1,
            non_portable: false,
        };
        d.functions.insert(f, record);
        *function = handle(f);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetParamInfo(
    function: Handle,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> u32 {
    with_context("cuFuncGetParamInfo", |d, context| {
        let owner = d.functions.get(&id(function)).map(|f| f.context);
        owned(d, "function", owner, context)?;
        if d.no_param_info {
            return Err(code::NOT_SUPPORTED);
        }
        let sizes = fixtures::any_signature(&d.functions[&id(function)].name).ok_or(code::NOT_SUPPORTED)?;
        let &wanted = sizes.get(index).ok_or(code::INVALID_VALUE)?;
        let at = sizes[..index].iter().fold(0usize, |at, &s| at.next_multiple_of(s) + s);
        *offset = at.next_multiple_of(wanted);
        *size = wanted;
        Ok(())
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuLaunchKernel(
    function: Handle,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    let shape = kernels::Shape::of([grid_x, grid_y, grid_z], [block_x, block_y, block_z]);
    launch("cuLaunchKernel", function, shape, shared, stream, params, extra)
}

/// A launch of `function` with `shape`, as `call`.
pub(crate) unsafe fn launch(
    call: &str,
    function: Handle,
    shape: kernels::Shape,
    shared: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    let ([grid_x, grid_y, grid_z], [block_x, block_y, block_z]) = (shape.grid, shape.block);
    with_context(call, |d, context| {
        let owner = d.functions.get(&id(function)).map(|f| f.context);
        owned(d, "function", owner, context)?;
        let stream = d.stream(context, id(stream))?;
        let threads = block_x as u64 * block_y as u64 * block_z as u64;
        // The driver's limits: a block of at most 1024 threads, a grid of at most 65535 blocks in y
        // and z (2^31 - 1 in x), the kernel's dynamic shared memory limit (48 KiB with its static
        // shared memory, unless it opted in to more: `cuFuncSetAttribute`).
        let grid_too_large = grid_x > i32::MAX as c_uint || grid_y > 65535 || grid_z > 65535;
        let too_much_shared = shared > d.functions[&id(function)].max_dynamic_shared;
        let empty = shape.grid.contains(&0) || shape.block.contains(&0);
        if empty || threads > 1024 || grid_too_large || too_much_shared || !extra.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let name = d.functions[&id(function)].name.clone();
        let variables = d.modules[&d.functions[&id(function)].module].variables.variables.clone();
        let sizes = fixtures::any_signature(&name).ok_or(code::NOT_SUPPORTED)?;
        if !sizes.is_empty() && params.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // As the driver: one kernelParams entry per parameter of the kernel, each read for the
        // parameter's size. A caller that passed fewer made this read past its array.
        let args = (0..sizes.len())
            .map(|i| std::slice::from_raw_parts(*params.add(i) as *const u8, sizes[i]).to_vec())
            .collect();
        d.queue(stream, Op::Launch { name, args, shape, variables });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: u32, text: *mut *const c_char) -> u32 {
    let message: &'static CStr = match error {
        code::SUCCESS => c"no error",
        code::INVALID_VALUE => c"invalid argument",
        code::OUT_OF_MEMORY => c"out of memory",
        code::NOT_INITIALIZED => c"initialization error",
        code::INVALID_DEVICE => c"invalid device ordinal",
        code::INVALID_IMAGE => c"device kernel image is invalid",
        code::NO_BINARY_FOR_GPU => c"no kernel image is available for execution on the device",
        code::INVALID_CONTEXT => c"invalid device context",
        code::INVALID_HANDLE => c"invalid resource handle",
        code::NOT_FOUND => c"named symbol not found",
        code::ILLEGAL_ADDRESS => c"an illegal memory access was encountered (injected by the CUDA driver stand-in)",
        code::CONTEXT_IS_DESTROYED => c"context is destroyed",
        code::NOT_SUPPORTED => {
            c"operation not supported: the CUDA driver stand-in runs only the kernels it knows, and reads no compressed image (not a GPU)"
        }
        code::SYSTEM_NOT_READY => c"system not yet initialized",
        code::UNKNOWN => c"unknown error",
        _ => return code::INVALID_VALUE,
    };
    *text = message.as_ptr();
    code::SUCCESS
}

// ---- For the tests: switches and what the stand-in saw ----

/// Pinned host allocations not freed.
#[no_mangle]
pub extern "C" fn standin_pinned_outstanding() -> usize {
    driver().pinned.len()
}

/// Contexts alive, primary ones included.
#[no_mangle]
pub extern "C" fn standin_contexts() -> usize {
    driver().contexts.len()
}

/// Contract violations seen; their text, one a line, goes into `buffer` (cut at `len` bytes).
#[no_mangle]
pub unsafe extern "C" fn standin_violations(buffer: *mut u8, len: usize) -> usize {
    let d = driver();
    let text = d.violations.join("\n");
    let n = text.len().min(len);
    std::ptr::copy_nonoverlapping(text.as_ptr(), buffer, n);
    d.violations.len()
}

/// Back to the defaults: parameter info on, a fault breaks the whole process, nothing seen.
#[no_mangle]
pub extern "C" fn standin_reset() {
    let mut d = driver();
    d.no_param_info = false;
    d.fault_confined = false;
    d.process_poisoned = false;
    d.host_to_device_budget = None;
    d.violations.clear();
}

/// Whether `cuFuncGetParamInfo` answers (a CUDA 12.4+ driver, the default) or not (older).
#[no_mangle]
pub extern "C" fn standin_set_param_info(on: c_int) {
    driver().no_param_info = on == 0;
}

/// Makes the host-to-device copy that takes the bytes copied past `bytes` from now fault when it
/// runs, once: a DMA that fails halfway. The call that queued it has returned success; the
/// fault is reported by the next wait and loses the context (and the process's other contexts
/// unless faults are confined), as `CUDA_ERROR_ILLEGAL_ADDRESS`.
#[no_mangle]
pub extern "C" fn standin_fail_host_to_device_after(bytes: usize) {
    driver().host_to_device_budget = Some(bytes);
}

/// Whether a fault breaks every context of the process (the default, as on an H100 with
/// driver 580) or only its own (what the backend once assumed).
#[no_mangle]
pub extern "C" fn standin_set_fault_poisons_process(on: c_int) {
    driver().fault_confined = on == 0;
}

#[cfg(test)]
mod tests;
