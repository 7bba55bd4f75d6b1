//! `cuGetExportTable`: the private tables the CUDA runtime asks the driver for by UUID, served
//! here. Each is an array of pointers, most starting with their own size in bytes. What the
//! runtime calls through them, the shim answers locally: loading its fat binaries, primary
//! contexts, context-local storage, the integrity check ([`crate::integrity`]); slots it
//! never calls in the tested runtimes (12.9, 13.x) answer success and do nothing. The tables
//! CUDA's math libraries ask for (cuBLAS, cuFFT: `UNSERVED`) are served with every slot
//! refused and named on stderr, so that what a library needed is known by slot; any other
//! unknown table is refused with a line on stderr naming it.

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
    crate::context::current_context()
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

/// A table's UUID from its 32 hex digits, its bytes in the order the runtime passes them.
const fn uuid(hex: &str) -> [u8; 16] {
    const fn digit(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => panic!("not a lower-case hex digit"),
        }
    }
    let hex = hex.as_bytes();
    assert!(hex.len() == 32, "a UUID is 32 hex digits");
    let mut out = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = digit(hex[2 * i]) << 4 | digit(hex[2 * i + 1]);
        i += 1;
    }
    out
}

// ---- Tables known by UUID only: every slot refused, naming itself ----

/// The tables whose slots the shim knows nothing of, by UUID: CUDA's libraries ask for them
/// (CUDA 13's cuBLAS the first, its cuFFT the second; the third, an NVVM IR compiler, NVRTC's
/// `nvrtcCompileProgram`, which compiles without it: traces in docs/gpu-runs/2026-11-30/traces/). Each slot answers `CUDA_ERROR_NOT_SUPPORTED`
/// and names itself and its first call's arguments once on stderr, so that a library which
/// can do without the slot goes on, and one that cannot says which slot it needed.
const UNSERVED: [&str; 3] =
    ["69a28e9f24498b47b030c5da330ea4e9", "6e163fbeb958444d835ce182aff1991e", "da9151d33ae6cc41a5c04f26d533e328"];

/// Slots in each such table, as the 580.159 driver's own size slot says.
const UNSERVED_SLOTS: [usize; 3] = [34, 99, 7];

/// Slot `SLOT` of the table `UNSERVED[TABLE]`: refused, named once.
unsafe extern "C" fn unserved<const TABLE: usize, const SLOT: usize>(
    a0: usize,
    a1: usize,
    a2: usize,
    a3: usize,
) -> u32 {
    static SAID: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if !said.contains(&(TABLE, SLOT)) {
        said.push((TABLE, SLOT));
        eprintln!(
            "ac-cuda: cuGetExportTable_{}_slot{SLOT} is not supported on remote accelerators \
             (CUDA_ERROR_NOT_SUPPORTED); arguments {a0:#x} {a1:#x} {a2:#x} {a3:#x}",
            UNSERVED[TABLE]
        );
    }
    code::NOT_SUPPORTED
}

/// The refusing table `UNSERVED[$t]`, `$n` slots: its size, then `unserved` in slots 1 to
/// `$n - 1` (taken from a list of 98).
macro_rules! unserved_table {
    ($t:literal, $n:expr) => {
        unserved_table!($t, $n; 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29
            30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61
            62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93
            94 95 96 97 98)
    };
    ($t:literal, $n:expr; $($slot:literal)*) => {{
        let all: [*const c_void; 99] = [size_of($n), $(unserved::<$t, $slot> as *const c_void),*];
        let mut t = [IDLE; $n];
        let mut i = 0;
        while i < $n {
            t[i] = all[i];
            i += 1;
        }
        Table(t)
    }};
}

static UNSERVED_0: Table<{ UNSERVED_SLOTS[0] }> = unserved_table!(0, UNSERVED_SLOTS[0]);
static UNSERVED_1: Table<{ UNSERVED_SLOTS[1] }> = unserved_table!(1, UNSERVED_SLOTS[1]);
static UNSERVED_2: Table<{ UNSERVED_SLOTS[2] }> = unserved_table!(2, UNSERVED_SLOTS[2]);

/// The start-up shortcut's table, which the shim does not serve.
const SKIP_INIT: [u8; 16] = uuid("f8cff95121468b4eb9e2fb469e7c0dd9");

/// The tables the shim serves, by UUID.
fn tables() -> [([u8; 16], *const c_void); 13] {
    [
        (uuid(UNSERVED[0]), UNSERVED_0.address()),
        (uuid(UNSERVED[1]), UNSERVED_1.address()),
        (uuid(UNSERVED[2]), UNSERVED_2.address()),
        (uuid("6bd5fb6c5bf4e74a8987d93912fd9df9"), CUDART_INTERFACE.address()),
        (uuid("42d85a8123f6cb478298f6e78a3aecdc"), TOOLS_TLS.address()),
        (uuid("a094798c2e742e7493f20800200c0a66"), TOOLS_RUNTIME_CALLBACK_HOOKS.address()),
        (uuid("c693336e1121df11a8c368f355d89593"), CONTEXT_LOCAL_STORAGE.address()),
        (uuid("0ca50b8c1004929a89a7d0df10e77286"), CTX_CREATE_BYPASS.address()),
        (uuid("195bcbf4d67d024aacc51d29cea631ae"), HEAP_ACCESS.address()),
        (uuid("b10541e1f7c7c74a9f64f223be99f1e2"), DEVICE_EXTENDED_RT.address()),
        (uuid("d4082055bde6704b8d34ba123c66e1f2"), INTEGRITY_CHECK.address()),
        (uuid("263e88607cd2614392f6bbd5006dfa7e"), CONTEXT_CHECKS.address()),
        (uuid("21318c60971432488ca641ff7324c8f2"), CUDA13_CONTEXT.address()),
    ]
}

/// The table the runtime names by `id`.
fn table_for(id: &[u8; 16]) -> Option<*const c_void> {
    tables().into_iter().find(|(uuid, _)| uuid == id).map(|(_, table)| table)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_read_in_the_runtimes_byte_order() {
        assert_eq!(SKIP_INIT[..4], [0xF8, 0xCF, 0xF9, 0x51]);
        let cudart = [0x6B, 0xD5, 0xFB, 0x6C, 0x5B, 0xF4, 0xE7, 0x4A, 0x89, 0x87, 0xD9, 0x39, 0x12, 0xFD, 0x9D, 0xF9];
        assert_eq!(table_for(&cudart), Some(CUDART_INTERFACE.address()));
        assert_eq!(table_for(&SKIP_INIT), None);
    }

    #[test]
    fn a_math_library_table_is_served_and_each_slot_refuses() {
        for (id, slots) in UNSERVED.into_iter().zip(UNSERVED_SLOTS) {
            let table = table_for(&uuid(id)).expect("served") as *const usize;
            // SAFETY: the served tables are `slots` pointers long, slot 0 their size.
            let words = unsafe { std::slice::from_raw_parts(table, slots) };
            assert_eq!(words[0], slots * std::mem::size_of::<usize>());
            for (slot, &f) in words.iter().enumerate().skip(1) {
                // SAFETY: every slot past the size is an `unserved` instance of this signature.
                let f: unsafe extern "C" fn(usize, usize, usize, usize) -> u32 = unsafe { std::mem::transmute(f) };
                assert_eq!(unsafe { f(slot, 0, 0, 0) }, code::NOT_SUPPORTED, "{id} slot {slot}");
            }
        }
    }
}
