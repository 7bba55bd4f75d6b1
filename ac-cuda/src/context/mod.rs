//! Contexts, kept locally: each device has its primary context, and the contexts the program
//! creates (`cuCtxCreate`), and each thread a stack of current contexts. The remote session is
//! every context's state on the GPU: a created context shares its device's memory, modules and
//! streams with the primary one; what it adds is its own handle (the runtime keeps its state by
//! context), and the memory `cuMemAlloc` made while it was current, freed when it is destroyed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

pub mod settings;

use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::{self, put, Context};

thread_local! {
    /// This thread's context stack (top last), as context handles.
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The handle of device `ordinal`'s primary context.
pub fn handle_of(context: &Arc<Context>) -> usize {
    Arc::as_ptr(context) as usize
}

/// A context the program created. Never freed: a destroyed one keeps its handle, so that no
/// later context gets it (the runtime keeps state by context handle, and would take a new
/// context at a destroyed one's address for it).
#[derive(Debug)]
struct Created {
    context: Arc<Context>,
    alive: AtomicBool,
    /// Its `cuCtxGetId`, after the primary contexts' (their ordinal + 1).
    id: u64,
}

/// The contexts the program created, destroyed ones included, by handle.
fn created() -> MutexGuard<'static, HashMap<usize, &'static Created>> {
    static CREATED: OnceLock<Mutex<HashMap<usize, &'static Created>>> = OnceLock::new();
    CREATED.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// The created context `handle` names, destroyed or not.
fn created_of(handle: usize) -> Option<&'static Created> {
    created().get(&handle).copied()
}

/// The context a handle names: a primary or a created one (`CUDA_ERROR_CONTEXT_IS_DESTROYED`
/// once destroyed).
pub fn context_of(handle: usize) -> CuResult<&'static Arc<Context>> {
    let shim = state::shim()?;
    if let Some(primary) = shim.devices.iter().map(|d| &d.context).find(|c| handle_of(c) == handle) {
        return Ok(primary);
    }
    let created = created_of(handle).ok_or(Error::Code(code::INVALID_CONTEXT))?;
    if !created.alive.load(Ordering::Acquire) {
        return Err(Error::Code(code::CONTEXT_IS_DESTROYED));
    }
    Ok(&created.context)
}

/// This thread's current context.
pub fn current_context() -> CuResult<&'static Arc<Context>> {
    context_of(STACK.with(|s| s.borrow().last().copied()).ok_or(Error::Code(code::INVALID_CONTEXT))?)
}

/// The handle of this thread's current context, if the program created it.
pub fn created_current() -> Option<usize> {
    let top = STACK.with(|s| s.borrow().last().copied())?;
    created_of(top).map(|_| top)
}

/// Creates a context on device `ordinal`, makes it current (pushed on this thread's stack) and
/// answers its handle in `out`.
unsafe fn create(out: *mut usize, flags: c_uint, ordinal: c_int) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    settings::check_flags(flags)?;
    let device = state::shim()?.device(ordinal)?.context.device;
    let mut all = created();
    let id = 1 << 32 | all.len() as u64;
    let context = Arc::new(Context { device, storage: Mutex::default() });
    let record: &'static Created = Box::leak(Box::new(Created { context, alive: AtomicBool::new(true), id }));
    let handle = handle_of(&record.context);
    all.insert(handle, record);
    settings::set_flags(handle, flags);
    STACK.with(|s| s.borrow_mut().push(handle));
    put(out, handle)
}

/// Destroys a created context: the memory `cuMemAlloc` made in it is freed (after the work
/// that uses it, which the backend finishes first), and it leaves this thread's stack if it is
/// current; other threads that hold it get `CUDA_ERROR_CONTEXT_IS_DESTROYED`.
fn destroy(handle: usize) -> CuResult<()> {
    let created = created_of(handle).ok_or(Error::Code(code::INVALID_CONTEXT))?;
    if !created.alive.swap(false, Ordering::AcqRel) {
        return Err(Error::Code(code::INVALID_CONTEXT));
    }
    let shim = state::shim()?;
    let gone: Vec<state::Allocation> = {
        let mut memory = shim.memory.lock().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<_> = memory.iter().filter(|(_, a)| a.context == Some(handle)).map(|(k, _)| *k).collect();
        keys.iter().filter_map(|k| memory.remove(k)).collect()
    };
    drop(gone); // each buffer frees itself remotely, outside the lock
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if s.last() == Some(&handle) {
            s.pop();
        }
    });
    Ok(())
}

/// `CUctxCreateParams`: execution affinity or graphics interop, neither served.
#[repr(C)]
#[derive(Debug)]
pub struct CreateParams {
    affinity: *const c_void,
    affinity_count: c_int,
    cig: *const c_void,
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(context: *mut usize, flags: c_uint, device: c_int) -> u32 {
    guard("cuCtxCreate", || create(context, flags, device))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate(context: *mut usize, flags: c_uint, device: c_int) -> u32 {
    cuCtxCreate_v2(context, flags, device)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    context: *mut usize,
    _affinity: *const c_void,
    affinity_count: c_int,
    flags: c_uint,
    device: c_int,
) -> u32 {
    guard("cuCtxCreate", || {
        if affinity_count != 0 {
            return Err(Error::said(code::NOT_SUPPORTED, "execution affinity is not supported on remote accelerators"));
        }
        create(context, flags, device)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    context: *mut usize,
    params: *const CreateParams,
    flags: c_uint,
    device: c_int,
) -> u32 {
    guard("cuCtxCreate", || {
        if let Some(p) = params.as_ref() {
            if !p.affinity.is_null() || p.affinity_count != 0 || !p.cig.is_null() {
                let why = "execution affinity and graphics interop are not supported on remote accelerators";
                return Err(Error::said(code::NOT_SUPPORTED, why));
            }
        }
        create(context, flags, device)
    })
}

#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(context: usize) -> u32 {
    guard("cuCtxDestroy", || destroy(context))
}

#[no_mangle]
pub extern "C" fn cuCtxDestroy(context: usize) -> u32 {
    cuCtxDestroy_v2(context)
}

/// The ordinal of this thread's current context's device, or `CUDA_ERROR_INVALID_CONTEXT`.
pub fn current_device() -> CuResult<usize> {
    let top = STACK.with(|s| s.borrow().last().copied()).ok_or(Error::Code(code::INVALID_CONTEXT))?;
    Ok(context_of(top)?.device)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(context: *mut usize, device: c_int) -> u32 {
    guard("cuDevicePrimaryCtxRetain", || put(context, handle_of(&state::shim()?.device(device)?.context)))
}

// Primary contexts live as long as the process: releasing and resetting change nothing (the
// remote session ends when the process exits). The names before CUDA 11 are the same calls.
// Their flags are [`settings`]'.

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> u32 {
    guard("cuDevicePrimaryCtxRelease", || state::shim()?.device(device).map(drop))
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease(device: c_int) -> u32 {
    cuDevicePrimaryCtxRelease_v2(device)
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(device: c_int) -> u32 {
    guard("cuDevicePrimaryCtxReset", || state::shim()?.device(device).map(drop))
}

#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxReset(device: c_int) -> u32 {
    cuDevicePrimaryCtxReset_v2(device)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(context: *mut usize) -> u32 {
    guard("cuCtxGetCurrent", || put(context, STACK.with(|s| s.borrow().last().copied().unwrap_or(0))))
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(context: usize) -> u32 {
    guard("cuCtxSetCurrent", || {
        if context != 0 {
            context_of(context)?;
        }
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            if context != 0 {
                s.push(context);
            }
        });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(context: usize) -> u32 {
    guard("cuCtxPushCurrent", || {
        context_of(context)?;
        STACK.with(|s| s.borrow_mut().push(context));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(context: *mut usize) -> u32 {
    guard("cuCtxPopCurrent", || {
        let top = STACK.with(|s| s.borrow_mut().pop()).ok_or(Error::Code(code::INVALID_CONTEXT))?;
        if !context.is_null() {
            *context = top;
        }
        Ok(())
    })
}

// CUDA 2.0's names, of the same signatures (`cuda.h` maps them to the `_v2` forms since 4.0).
crate::per_thread_aliases! {
    cuCtxPushCurrent => cuCtxPushCurrent_v2,
    cuCtxPopCurrent => cuCtxPopCurrent_v2,
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> u32 {
    guard("cuCtxGetDevice", || put(device, current_device()? as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice_v2(device: *mut c_int, context: usize) -> u32 {
    guard("cuCtxGetDevice", || {
        let ordinal = if context == 0 { current_device()? } else { context_of(context)?.device };
        put(device, ordinal as c_int)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetApiVersion(context: usize, version: *mut c_uint) -> u32 {
    guard("cuCtxGetApiVersion", || {
        if context != 0 {
            context_of(context)?;
        }
        put(version, 12010)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetId(context: usize, id: *mut u64) -> u32 {
    guard("cuCtxGetId", || {
        let handle = if context == 0 { handle_of(current_context()?) } else { context };
        let found = context_of(handle)?;
        put(id, created_of(handle).map_or(found.device as u64 + 1, |c| c.id))
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> u32 {
    guard("cuCtxSynchronize", || synchronize(current_device()?))
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize_v2(context: usize) -> u32 {
    guard("cuCtxSynchronize", || {
        synchronize(if context == 0 { current_device()? } else { context_of(context)?.device })
    })
}

/// Waits for everything queued on `device`, and answers the first error of that work; then
/// managed memory is the host's again, and memory freed to its pools may go to any stream.
pub fn synchronize(device: usize) -> CuResult<()> {
    let shim = state::shim()?;
    let before = crate::pool::mark();
    shim.block_on(shim.devices[device].acc.synchronize())?;
    crate::pool::settled(device, None, before);
    crate::managed::settle(device, None)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> u32 {
    guard("cuCtxGetStreamPriorityRange", || {
        if !least.is_null() {
            *least = 0;
        }
        if !greatest.is_null() {
            *greatest = 0;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut c_int) -> u32 {
    guard("cuCtxGetCacheConfig", || put(config, 0))
}

#[no_mangle]
pub extern "C" fn cuCtxSetCacheConfig(_config: c_int) -> u32 {
    guard("cuCtxSetCacheConfig", || Ok(()))
}
