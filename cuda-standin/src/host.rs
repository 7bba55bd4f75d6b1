//! The builtin kernels as the GPU runs them: `kernels.cu` itself, compiled for the host by
//! g++ (build.rs; `host/cuda_host.h` supplies the CUDA built-ins, `host/builtins.cpp` the
//! launcher), so that every test through the stand-in executes the kernels' own source, the
//! source NVRTC compiles for a GPU, and not a transcription of it. A launch runs each thread
//! of its grid in turn on the thread that waits for it; a pointer parameter is resolved to the
//! host memory of the context's allocation it points into (an address in none faults the
//! launch, as the first access would on a GPU).

use std::ffi::{c_char, c_int, c_uint, c_void, CString};

/// Resolves a device address to host memory; null: the address lies in no allocation.
type Resolve = unsafe extern "C" fn(memory: *mut c_void, address: u64) -> *mut c_void;

extern "C" {
    fn standin_builtin_signature(name: *const c_char, out: *mut c_uint, max: c_uint) -> c_int;
    fn standin_builtin_launch(
        name: *const c_char,
        grid: *const c_uint,
        block: *const c_uint,
        values: *const *const c_void,
        resolve: Resolve,
        memory: *mut c_void,
    ) -> c_int;
}

/// The parameter sizes of builtin kernel `name` as g++ laid out its signature in
/// `kernels.cu`; `None`: not a builtin.
pub fn signature(name: &str) -> Option<Vec<usize>> {
    let name = CString::new(name).ok()?;
    let mut sizes = [0 as c_uint; 64];
    // SAFETY: a NUL-terminated name and an array of `sizes.len()` entries.
    let count = unsafe { standin_builtin_signature(name.as_ptr(), sizes.as_mut_ptr(), sizes.len() as c_uint) };
    let count = usize::try_from(count).ok()?;
    Some(sizes.get(..count).expect("a builtin of at most 64 parameters").iter().map(|&s| s as usize).collect())
}

/// Runs builtin kernel `name` (its arguments checked against [`signature`]) on `grid` blocks
/// of `block` threads (x, y, z),
/// resolving its pointer parameters through `resolve`; `None`: it faulted.
pub fn launch(
    name: &str,
    args: &[Vec<u8>],
    grid: [u32; 3],
    block: [u32; 3],
    resolve: &mut dyn FnMut(u64) -> Option<*mut u8>,
) -> Option<()> {
    unsafe extern "C" fn trampoline(memory: *mut c_void, address: u64) -> *mut c_void {
        // SAFETY: `memory` is the `&mut dyn FnMut` passed below, alive for the launch.
        let resolve = unsafe { &mut *(memory as *mut &mut dyn FnMut(u64) -> Option<*mut u8>) };
        resolve(address).map_or(std::ptr::null_mut(), |p| p.cast())
    }
    let name = CString::new(name).ok()?;
    let values: Vec<*const c_void> = args.iter().map(|a| a.as_ptr().cast()).collect();
    let mut resolve = resolve;
    // SAFETY: a NUL-terminated name, three dimensions each, one pointer to each parameter's
    // bytes (sized as the signature says, checked by the caller), and a resolver that
    // outlives the call. The kernel writes only through pointers `resolve` returned.
    let ran = unsafe {
        standin_builtin_launch(
            name.as_ptr(),
            grid.as_ptr(),
            block.as_ptr(),
            values.as_ptr(),
            trampoline,
            (&mut resolve as *mut &mut dyn FnMut(u64) -> Option<*mut u8>).cast(),
        )
    };
    (ran == 0).then_some(())
}
