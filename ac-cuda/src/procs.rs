//! `cuGetProcAddress`: the entry point of a name at a version. The CUDA runtime looks up every
//! driver function it uses this way (some 430 of them), never by symbol. A name's versions come
//! from `cudaTypedefs.h` (`generated::PROCS`): `cuMemAlloc` at 3020 and later is
//! `cuMemAlloc_v2`; a per-thread-default-stream lookup answers the `_ptds`/`_ptsz` variant.
//! The entry point is then this library's own symbol of that name.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::error::{code, tracing, Error};
use crate::generated::{PER_THREAD, PROCS};
use crate::guard;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;
/// `CUdriverProcAddressQueryResult`: found, no such symbol, the version asked is too old.
const FOUND: c_int = 0;
const SYMBOL_NOT_FOUND: c_int = 1;
const VERSION_NOT_SUFFICIENT: c_int = 2;

/// The symbol that serves `name` at `version`, or why none does.
pub fn symbol_for(name: &str, version: u32, flags: u64) -> Result<&str, c_int> {
    let versions: Vec<&(&str, u32, &str)> = PROCS.iter().filter(|(n, _, _)| *n == name).collect();
    let symbol = if versions.is_empty() {
        name
    } else {
        let usable = versions.iter().filter(|(_, v, _)| *v <= version).max_by_key(|(_, v, _)| *v);
        usable.map(|(_, _, s)| *s).ok_or(VERSION_NOT_SUFFICIENT)?
    };
    if flags & PER_THREAD_DEFAULT_STREAM != 0 {
        if let Some((_, threaded)) = PER_THREAD.iter().find(|(base, _)| *base == symbol) {
            return Ok(threaded);
        }
    }
    Ok(symbol)
}

/// This library's handle, for looking its own symbols up.
fn this_library() -> usize {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        // SAFETY: dladdr reads the loader's tables for an address of this library; the name it
        // answers is the path this library was loaded from, reopened without loading anything.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(this_library as *const c_void, &mut info) == 0 || info.dli_fname.is_null() {
                return libc::RTLD_DEFAULT as usize;
            }
            let handle = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if handle.is_null() {
                libc::RTLD_DEFAULT as usize
            } else {
                handle as usize
            }
        }
    })
}

/// The address of this library's function `symbol`.
fn address_of(symbol: &str) -> Option<*mut c_void> {
    let name = std::ffi::CString::new(symbol).ok()?;
    // SAFETY: a handle from dlopen (or RTLD_DEFAULT) and a NUL-terminated name.
    let p = unsafe { libc::dlsym(this_library() as *mut c_void, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

unsafe fn lookup(symbol: *const c_char, out: *mut *mut c_void, version: c_int, flags: u64) -> Result<(), c_int> {
    let name = CStr::from_ptr(symbol).to_string_lossy();
    let found = symbol_for(&name, version.max(0) as u32, flags).and_then(|s| address_of(s).ok_or(SYMBOL_NOT_FOUND));
    // The runtime probes with an empty name first; not a function it lacks.
    if tracing() && !name.is_empty() {
        match found {
            Ok(_) => eprintln!("ac-cuda: cuGetProcAddress({name}, {version}, {flags}): found"),
            Err(why) => eprintln!("ac-cuda: cuGetProcAddress({name}, {version}, {flags}): unresolved ({why})"),
        }
    }
    *out = found?;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    out: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> u32 {
    guard("cuGetProcAddress", || {
        if symbol.is_null() || out.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        lookup(symbol, out, version, flags).map_err(|_| Error::Code(code::NOT_FOUND))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    out: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> u32 {
    guard("cuGetProcAddress", || {
        if symbol.is_null() || out.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let result = lookup(symbol, out, version, flags);
        if !status.is_null() {
            *status = result.err().unwrap_or(FOUND);
        }
        if result.is_err() {
            *out = std::ptr::null_mut();
        }
        result.map_err(|_| Error::Code(code::NOT_FOUND))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_resolves_to_its_variant_of_the_version_asked() {
        assert_eq!(symbol_for("cuMemAlloc", 13000, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(symbol_for("cuMemAlloc", 2000, 0), Ok("cuMemAlloc"));
        assert_eq!(symbol_for("cuCtxCreate", 11040, 0), Ok("cuCtxCreate_v3"));
        assert_eq!(symbol_for("cuGetProcAddress", 12000, 0), Ok("cuGetProcAddress_v2"));
        assert_eq!(symbol_for("cuMemcpyHtoD", 13000, PER_THREAD_DEFAULT_STREAM), Ok("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(symbol_for("cuLibraryLoadData", 11000, 0), Err(VERSION_NOT_SUFFICIENT));
    }
}
