//! `cuGetExportTable`: the private tables the CUDA runtime asks the driver for by UUID, served
//! here. Each is an array of pointers, most starting with their own size in bytes. What the
//! runtime calls through them, the shim answers locally: loading its fat binaries, primary
//! contexts, context-local storage, the integrity check ([`crate::integrity`]); slots it
//! never calls in the tested runtimes (12.9, 13.x) answer success and do nothing. An unknown
//! table is refused with a line on stderr naming it.

use std::ffi::{c_int, c_uchar, c_void};
use std::sync::Mutex;

use crate::context::context_of;
use crate::error::{code, Error};
use crate::guard;
use crate::integrity::{self, Subject};
use crate::state::{self, put};

/// A table: pointers, shared read-only with the runtime.
#[repr(transparent)]
#[derive(Debug)]
pub struct Table<const N: usize>([*const c_void; N]);

// SAFETY: the tables are never written after they are built; they hold code addresses and sizes.
unsafe impl<const N: usize> Sync for Table<N> {}

impl<const N: usize> Table<N> {
    fn address(&'static self) -> *const c_void {
        self.0.as_ptr() as *const c_void
    }
}

/// The size slot of a table of `n` pointers.
const fn size_of(n: usize) -> *const c_void {
    (n * std::mem::size_of::<usize>()) as *const c_void
}

/// A slot the runtime does not call: success, nothing done.
extern "C" fn idle() -> u32 {
    0
}

const IDLE: *const c_void = idle as *const c_void;

/// A table of `N` slots: its size, then `slots` at their indexes, `IDLE` elsewhere.
const fn table<const N: usize>(sized: bool, slots: &[(usize, *const c_void)]) -> Table<N> {
    let mut t = [IDLE; N];
    if sized {
        t[0] = size_of(N);
    }
    let mut i = 0;
    while i < slots.len() {
        t[slots[i].0] = slots[i].1;
        i += 1;
    }
    Table(t)
}

// ---- CUDART_INTERFACE ----

unsafe extern "C" fn module_from_fat_binary(module: *mut usize, wrapper: *const c_void) -> u32 {
    crate::module::cuModuleLoadData(module, wrapper)
}

unsafe extern "C" fn primary_context(context: *mut usize, device: c_int) -> u32 {
    crate::context::cuDevicePrimaryCtxRetain(context, device)
}

unsafe extern "C" fn module_from_fat_binary_ext(
    module: *mut usize,
    wrapper: *const c_void,
    _a: *mut c_void,
    _b: *mut c_void,
    _c: u32,
) -> u32 {
    crate::module::cuModuleLoadData(module, wrapper)
}

unsafe extern "C" fn module_from_fat_binary_ext2(
    fatbin: *const c_void,
    module: *mut usize,
    _a: *mut c_void,
    _b: *mut c_void,
    _c: u32,
) -> u32 {
    crate::module::cuModuleLoadData(module, fatbin)
}

static CUDART_INTERFACE: Table<13> = table(
    true,
    &[
        (1, module_from_fat_binary as *const c_void),
        (2, primary_context as *const c_void),
        (6, module_from_fat_binary_ext as *const c_void),
        (8, module_from_fat_binary_ext2 as *const c_void),
    ],
);

// ---- TOOLS_RUNTIME_CALLBACK_HOOKS: two buffers the runtime writes its hooks into ----

static HOOKS_1: Mutex<[u32; 1024]> = Mutex::new([0; 1024]);
static HOOKS_2: Mutex<[u32; 14]> = Mutex::new([0; 14]);

unsafe extern "C" fn hook_buffer_1(buffer: *mut *mut c_void, len: *mut usize) {
    let mut b = HOOKS_1.lock().unwrap_or_else(|p| p.into_inner());
    *buffer = b.as_mut_ptr() as *mut c_void;
    *len = b.len();
}

unsafe extern "C" fn hook_buffer_2(buffer: *mut *mut c_void, len: *mut usize) {
    let mut b = HOOKS_2.lock().unwrap_or_else(|p| p.into_inner());
    *buffer = b.as_mut_ptr() as *mut c_void;
    *len = b.len();
}

static TOOLS_RUNTIME_CALLBACK_HOOKS: Table<7> =
    table(true, &[(2, hook_buffer_1 as *const c_void), (6, hook_buffer_2 as *const c_void)]);

static TOOLS_TLS: Table<4> = table(true, &[]);

// ---- CONTEXT_LOCAL_STORAGE: the runtime's per-context state (read on every runtime call) ----

/// The context a storage call names: `context`, or the current one when null.
fn storage_context(context: usize) -> Result<&'static std::sync::Arc<state::Context>, Error> {
    if context != 0 {
        return context_of(context);
    }
    let shim = state::shim()?;
    Ok(&shim.devices[crate::context::current_device()?].context)
}

unsafe extern "C" fn storage_put(context: usize, key: usize, value: usize, _destructor: *const c_void) -> u32 {
    guard("context storage", || {
        storage_context(context)?.storage.lock().unwrap_or_else(|p| p.into_inner()).insert(key, value);
        Ok(())
    })
}

unsafe extern "C" fn storage_delete(context: usize, key: usize) -> u32 {
    guard("context storage", || {
        storage_context(context)?.storage.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        Ok(())
    })
}

unsafe extern "C" fn storage_get(value: *mut usize, context: usize, key: usize) -> u32 {
    guard("context storage", || {
        let stored = storage_context(context)?.storage.lock().unwrap_or_else(|p| p.into_inner()).get(&key).copied();
        put(value, stored.ok_or(Error::Code(code::INVALID_HANDLE))?)
    })
}

// This table has no size slot: slot 0 is a function.
static CONTEXT_LOCAL_STORAGE: Table<4> = table(
    false,
    &[(0, storage_put as *const c_void), (1, storage_delete as *const c_void), (2, storage_get as *const c_void)],
);

// ---- Tables whose calls the shim does not serve ----

unsafe extern "C" fn refused() -> u32 {
    code::NOT_SUPPORTED
}

unsafe extern "C" fn device_flag(result: *mut c_uchar, _device: c_int) -> u32 {
    if !result.is_null() {
        *result = 0;
    }
    0
}

static CTX_CREATE_BYPASS: Table<2> = table(true, &[(1, refused as *const c_void)]);
static HEAP_ACCESS: Table<3> = table(true, &[(1, refused as *const c_void), (2, refused as *const c_void)]);
static DEVICE_EXTENDED_RT: Table<26> =
    table(true, &[(5, refused as *const c_void), (13, device_flag as *const c_void)]);

unsafe extern "C" fn context_check(_context: usize, result: *mut u32, _other: *mut *const c_void) -> u32 {
    if !result.is_null() {
        *result = 0;
    }
    0
}

static CONTEXT_CHECKS: Table<4> = table(true, &[(2, context_check as *const c_void)]);

/// CUDA 13's runtime needs this table to exist (it segfaults without it); no slot of it was
/// seen called.
static CUDA13_CONTEXT: Table<95> = table(true, &[]);

// ---- INTEGRITY_CHECK ----

unsafe extern "C" fn integrity_check(version: u32, unix_seconds: u64, result: *mut [u64; 2]) -> u32 {
    guard("integrity check", || {
        let shim = state::shim()?;
        let devices = (0..shim.devices.len() as c_int)
            .map(|i| {
                let d = &shim.devices[i as usize];
                let attribute = |a| crate::init::attribute_of(d, i, a);
                (d.uuid, attribute(50), attribute(33), attribute(34))
            })
            .collect();
        let subject = Subject {
            driver_version: crate::init::DRIVER_VERSION as u32,
            runtime_version: version,
            process: std::process::id(),
            thread: libc::pthread_self() as u32,
            cudart_table: CUDART_INTERFACE.address() as usize,
            integrity_table: INTEGRITY_CHECK.address() as usize,
            function: INTEGRITY_CHECK.0[1] as usize,
            unix_seconds,
            devices,
        };
        put(result, integrity::check(&subject))
    })
}

static INTEGRITY_CHECK: Table<3> = table(true, &[(1, integrity_check as *const c_void)]);

/// The start-up shortcut's table, which the shim does not serve.
const SKIP_INIT: [u8; 16] =
    [0xF8, 0xCF, 0xF9, 0x51, 0x21, 0x46, 0x8B, 0x4E, 0xB9, 0xE2, 0xFB, 0x46, 0x9E, 0x7C, 0x0D, 0xD9];

/// The tables, by UUID (as the runtime passes it: 16 bytes).
fn table_for(uuid: &[u8; 16]) -> Option<*const c_void> {
    Some(match uuid {
        [0x6B, 0xD5, 0xFB, 0x6C, 0x5B, 0xF4, 0xE7, 0x4A, 0x89, 0x87, 0xD9, 0x39, 0x12, 0xFD, 0x9D, 0xF9] => {
            CUDART_INTERFACE.address()
        }
        [0x42, 0xD8, 0x5A, 0x81, 0x23, 0xF6, 0xCB, 0x47, 0x82, 0x98, 0xF6, 0xE7, 0x8A, 0x3A, 0xEC, 0xDC] => {
            TOOLS_TLS.address()
        }
        [0xA0, 0x94, 0x79, 0x8C, 0x2E, 0x74, 0x2E, 0x74, 0x93, 0xF2, 0x08, 0x00, 0x20, 0x0C, 0x0A, 0x66] => {
            TOOLS_RUNTIME_CALLBACK_HOOKS.address()
        }
        [0xC6, 0x93, 0x33, 0x6E, 0x11, 0x21, 0xDF, 0x11, 0xA8, 0xC3, 0x68, 0xF3, 0x55, 0xD8, 0x95, 0x93] => {
            CONTEXT_LOCAL_STORAGE.address()
        }
        [0x0C, 0xA5, 0x0B, 0x8C, 0x10, 0x04, 0x92, 0x9A, 0x89, 0xA7, 0xD0, 0xDF, 0x10, 0xE7, 0x72, 0x86] => {
            CTX_CREATE_BYPASS.address()
        }
        [0x19, 0x5B, 0xCB, 0xF4, 0xD6, 0x7D, 0x02, 0x4A, 0xAC, 0xC5, 0x1D, 0x29, 0xCE, 0xA6, 0x31, 0xAE] => {
            HEAP_ACCESS.address()
        }
        [0xB1, 0x05, 0x41, 0xE1, 0xF7, 0xC7, 0xC7, 0x4A, 0x9F, 0x64, 0xF2, 0x23, 0xBE, 0x99, 0xF1, 0xE2] => {
            DEVICE_EXTENDED_RT.address()
        }
        [0xD4, 0x08, 0x20, 0x55, 0xBD, 0xE6, 0x70, 0x4B, 0x8D, 0x34, 0xBA, 0x12, 0x3C, 0x66, 0xE1, 0xF2] => {
            INTEGRITY_CHECK.address()
        }
        [0x26, 0x3E, 0x88, 0x60, 0x7C, 0xD2, 0x61, 0x43, 0x92, 0xF6, 0xBB, 0xD5, 0x00, 0x6D, 0xFA, 0x7E] => {
            CONTEXT_CHECKS.address()
        }
        [0x21, 0x31, 0x8C, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8C, 0xA6, 0x41, 0xFF, 0x73, 0x24, 0xC8, 0xF2] => {
            CUDA13_CONTEXT.address()
        }
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetExportTable(out: *mut *const c_void, uuid: *const [u8; 16]) -> u32 {
    guard("cuGetExportTable", || {
        let uuid = uuid.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
        match table_for(uuid) {
            Some(t) => put(out, t),
            // A runtime's optional shortcut past its own start-up: refused with NOT_FOUND (what
            // a driver without it answers), so that the runtime starts as usual.
            None if *uuid == SKIP_INIT => {
                if !out.is_null() {
                    *out = std::ptr::null();
                }
                Err(Error::Code(code::NOT_FOUND))
            }
            None => {
                let id: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
                if !out.is_null() {
                    *out = std::ptr::null();
                }
                Err(Error::said(code::INVALID_VALUE, format!("unknown export table {id}")))
            }
        }
    })
}
