//! cuBLAS for programs linked against it: handles, streams, modes, the gemm family
//! (`cublasSgemm`, `cublasDgemm`, `cublasHgemm`, `cublasCgemm`, `cublasZgemm`, their
//! strided-batched forms: [`gemm`]; the `Ex` forms on `f32`, `f64`, complex, binary16 and
//! bfloat16 matrices: [`gemm_ex`]), level-1 and level-2 functions done as gemms (`dot`, `nrm2`, `axpy`, `copy`,
//! `scal`, `gemv`, `ger`: [`vectors`]), triangular solves (`trsm` and its batched form:
//! [`trsm`]), batched LU factorization, solves and inverses (`getrfBatched`, `getrsBatched`,
//! `getriBatched`: [`lu`]) and the host-device copies (`cublasSetVector`,
//! `cublasGetMatrix`, ...: [`copies`]). Scalars may be in host or device memory
//! (`cublasSetPointerMode`). cuBLASLt's matmul is [`lt`] (`libcublasLt` links here too).
//!
//! NVIDIA's `libcublas` runs on the driver only through private tables nobody documents
//! (docs/benchmarks/cuda-shim.md), so this library answers cuBLAS itself: it is installed as
//! `libcublas.so.12` and `libcublas.so.13` too, links to this one file, which the loader maps
//! once (a handle's memory is the shim's own). A gemm becomes a launch of the backend's builtin
//! `blas_sgemm`, `blas_dgemm`, `blas_gemm_ex`, `blas_cgemm` or `blas_zgemm` (column-major, as
//! cuBLAS) on the handle's stream: it goes out
//! without waiting, as cuBLAS's own kernels would, and the backend checks what it touches
//! against the session's buffers before it runs. The kernels are one thread an element of `C`,
//! not cuBLAS's tuned ones. Every other function of `cublas_api.h` is exported too
//! (`blas_generated.rs`) and answers `CUBLAS_STATUS_NOT_SUPPORTED`, naming itself once.
//!
//! NVIDIA's library versions its symbols (`cublasSgemm_v2@@libcublas.so.13`) and this one does
//! not: a program linked against NVIDIA's loads it all the same (glibc binds a versioned
//! reference to an unversioned definition), and the loader says so once on stderr ("no version
//! information available").

use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use ac_frontend::KernelArg;

use crate::builtins::{builtins, dims_for};
use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::graph::{self, NodeKind};
use crate::managed::calls::at_device_memory;
use crate::managed::{self, Reach};
use crate::memory::device_to_host;
use crate::state::{self, put, Registry};
use crate::stream::{device_of_stream, stream_of};
use settings::{Settings, POINTER_MODE_HOST};

mod band;
mod band_triangular;
mod contiguous;
mod copies;
mod extensions;
mod gemm;
mod gemm_batched;
mod gemm_ex;
mod gemm_grouped;
mod gemv_batched;
mod ilp64;
mod logger;
#[rustfmt::skip] // as scripts/gen-library-exports writes it
mod ilp64_generated;
mod lt;
mod lu;
mod magnitudes;
mod packed;
mod packed_vectors;
mod qr;
mod rank_k;
mod rotations;
mod settings;
mod structured;
mod triangle_vectors;
mod trsm;
mod vectors;
mod vectors_ex;

/// `cublasStatus_t`.
pub mod status {
    pub const SUCCESS: u32 = 0;
    pub const NOT_INITIALIZED: u32 = 1;
    pub const ALLOC_FAILED: u32 = 3;
    pub const INVALID_VALUE: u32 = 7;
    pub const EXECUTION_FAILED: u32 = 13;
    pub const INTERNAL_ERROR: u32 = 14;
    pub const NOT_SUPPORTED: u32 = 15;
}

/// The answer of a cuBLAS function the shim does not implement: `CUBLAS_STATUS_NOT_SUPPORTED`,
/// its name on stderr the first time.
pub fn not_supported(name: &'static str) -> u32 {
    crate::say_unsupported_once(name, "CUBLAS_STATUS_NOT_SUPPORTED");
    status::NOT_SUPPORTED
}

/// The cuBLAS version answered (13.0.0, as `CUBLAS_VERSION` counts: major, minor, patch).
const VERSION: c_int = 13_00_00;

/// A `cublasHandle_t`: the device current at its creation, its stream and modes.
#[derive(Debug)]
struct Handle {
    device: usize,
    /// A `CUstream` (0: the default stream).
    stream: AtomicUsize,
    settings: Settings,
}

impl Handle {
    /// Where its calls run: its device, its stream, its pointer mode, as now set.
    fn target(&self) -> Target {
        Target {
            device: self.device,
            stream: self.stream.load(Ordering::Relaxed),
            pointer_mode: self.settings.pointer_mode.load(Ordering::Relaxed),
        }
    }
}

/// The first address and the distance in elements between consecutive ones, if a batched
/// routine's `addresses` are evenly spaced, ascending by whole elements of `width` bytes (or all
/// the same: distance 0), so that one strided launch can do the batch.
fn evenly_spaced(addresses: &[u64], width: u64) -> Option<(u64, u64)> {
    let (&first, rest) = addresses.split_first()?;
    let Some(&second) = rest.first() else { return Some((first, 0)) };
    let step = second.checked_sub(first).filter(|&d| d % width == 0)?;
    let even = addresses.windows(2).all(|w| w[1].checked_sub(w[0]) == Some(step));
    even.then_some((first, step / width))
}

/// Where one call runs: a device, a stream of it (a `CUstream`, 0 the default), and where its
/// scalars and results are (`CUBLAS_POINTER_MODE_HOST` or `_DEVICE`). A cuBLAS call takes it
/// from its handle, a cuBLASLt call from its arguments and descriptor.
#[derive(Debug, Clone, Copy)]
struct Target {
    device: usize,
    stream: usize,
    pointer_mode: c_int,
}

impl Target {
    /// Whether scalars and results are in host memory.
    fn host_pointers(&self) -> bool {
        self.pointer_mode == POINTER_MODE_HOST
    }

    /// Sends a launch of builtin `name` on this target's stream, `threads` of them in blocks of
    /// `block`, without waiting; or records it, if the stream is capturing (its arguments are
    /// values: a call whose scalars or results are read on the host waits for the stream, which
    /// a capture refuses).
    fn launch(self, name: &'static str, args: &[KernelArg], threads: u64, block: u32) -> CuResult<()> {
        let function = builtins(self.device)?.function(name)?;
        let (device, args, dims) = (self.device, args.to_vec(), dims_for(threads, block));
        graph::or_record(self.stream, NodeKind::Kernel, move |handle| {
            let stream = stream_of(handle, device)?;
            let shim = state::shim()?;
            managed::device_work(&[Reach::Kernel(device, handle)], || {
                Ok(shim.block_on(function.launch_on(&stream, dims, &args))?)
            })
        })
    }

    /// `count` device addresses from each of the program's arrays at `arrays` (a batched
    /// routine's matrices), read once the stream's work before this call (which may have
    /// written them) is done.
    unsafe fn device_pointers<const N: usize>(self, arrays: [u64; N], count: c_int) -> CuResult<[Vec<u64>; N]> {
        let mut out = arrays.map(|_| vec![0u64; count.max(0) as usize]);
        if count <= 0 {
            return Ok(out);
        }
        let shim = state::shim()?;
        shim.block_on(stream_of(self.stream, self.device)?.synchronize())?;
        for (addresses, array) in out.iter_mut().zip(arrays) {
            let len = addresses.len() * 8;
            at_device_memory(array, || device_to_host(addresses.as_mut_ptr().cast(), array, len))?;
        }
        Ok(out)
    }
}

/// Runs a batched routine over its arrays of matrix addresses (`arrays[j][i]`: operand `j` of
/// matrix `i`, elements of `widths[j]` bytes): `launch(each operand's first address and stride in
/// elements, first matrix, count)` once for the whole batch if every array is evenly spaced
/// and that launch is accepted (not refused: results that overlap, matrices in several
/// allocations), else once a matrix, stride 0.
fn each_batch<const N: usize>(
    arrays: &[Vec<u64>; N],
    widths: [u64; N],
    mut launch: impl FnMut([(u64, u64); N], usize, u64) -> CuResult<()>,
) -> CuResult<()> {
    let count = arrays[0].len();
    if count > 1 {
        let mut spaced = [None; N];
        for (j, (addresses, width)) in arrays.iter().zip(widths).enumerate() {
            spaced[j] = evenly_spaced(addresses, width);
        }
        if spaced.iter().all(Option::is_some) && launch(spaced.map(Option::unwrap_or_default), 0, count as u64).is_ok()
        {
            return Ok(());
        }
    }
    for i in 0..count {
        launch(arrays.each_ref().map(|a| (a[i], 0)), i, 1)?;
    }
    Ok(())
}

fn handles() -> &'static Registry<Handle> {
    static HANDLES: OnceLock<Registry<Handle>> = OnceLock::new();
    HANDLES.get_or_init(Registry::default)
}

/// A handle's record; a stale or forged one is `CUBLAS_STATUS_NOT_INITIALIZED`.
fn handle(h: usize) -> CuResult<Arc<Handle>> {
    handles().get(h).map_err(|_| Error::said(code::INVALID_HANDLE, "not a cuBLAS handle of this program"))
}

/// Runs a cuBLAS entry point's body as [`crate::guard`] does a driver call's, answering a
/// `cublasStatus_t`; logs the call, and its failure, where the program turned logging on
/// ([`logger`]).
fn guard(call: &str, body: impl FnOnce() -> CuResult<()>) -> u32 {
    logger::log_call(call, None);
    let status = match crate::guard(call, body) {
        code::SUCCESS => status::SUCCESS,
        code::INVALID_VALUE => status::INVALID_VALUE,
        code::INVALID_HANDLE | code::INVALID_CONTEXT | code::NOT_INITIALIZED => status::NOT_INITIALIZED,
        code::OUT_OF_MEMORY => status::ALLOC_FAILED,
        code::NOT_SUPPORTED => status::NOT_SUPPORTED,
        code::UNKNOWN => status::INTERNAL_ERROR,
        _ => status::EXECUTION_FAILED,
    };
    if status != status::SUCCESS {
        logger::log_call(call, Some(status));
    }
    status
}

#[no_mangle]
pub unsafe extern "C" fn cublasCreate_v2(out: *mut usize) -> u32 {
    guard("cublasCreate", || {
        // cuBLAS binds a handle to the current device; a program that made no context yet
        // gets device 0, as its runtime's first call would.
        let device = current_device().unwrap_or(0);
        state::init()?.device(device as c_int)?;
        let record = Handle { device, stream: AtomicUsize::new(0), settings: Settings::default() };
        put(out, handles().insert(record))
    })
}

#[no_mangle]
pub extern "C" fn cublasDestroy_v2(h: usize) -> u32 {
    guard("cublasDestroy", || handles().remove(h).map(drop).map_err(|_| Error::Code(code::INVALID_HANDLE)))
}

#[no_mangle]
pub extern "C" fn cublasSetStream_v2(h: usize, stream: usize) -> u32 {
    guard("cublasSetStream", || {
        let handle = handle(h)?;
        if stream != 0 && device_of_stream(stream)? != handle.device {
            return Err(Error::said(code::INVALID_VALUE, "a stream of another device than the handle's"));
        }
        handle.stream.store(stream, Ordering::Relaxed);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetStream_v2(h: usize, stream: *mut usize) -> u32 {
    guard("cublasGetStream", || put(stream, handle(h)?.stream.load(Ordering::Relaxed)))
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetVersion_v2(h: usize, version: *mut c_int) -> u32 {
    guard("cublasGetVersion", || {
        handle(h)?;
        put(version, VERSION)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetProperty(property: c_int, value: *mut c_int) -> u32 {
    // MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL.
    guard("cublasGetProperty", || match property {
        0 => put(value, VERSION / 10_000),
        1 => put(value, VERSION / 100 % 100),
        2 => put(value, VERSION % 100),
        _ => Err(Error::Code(code::INVALID_VALUE)),
    })
}

#[no_mangle]
pub extern "C" fn cublasGetCudartVersion() -> usize {
    // The CUDA runtime cuBLAS 13.0 was built with (CUDART_VERSION).
    13_000
}

#[no_mangle]
pub unsafe extern "C" fn cublasXerbla(routine: *const c_char, parameter: c_int) {
    // BLAS's error handler, which cuBLAS's own routines call; a program may too.
    let routine = if routine.is_null() { "?".into() } else { std::ffi::CStr::from_ptr(routine).to_string_lossy() };
    eprintln!("ac-cuda: cuBLAS: parameter {parameter} of {routine} is wrong");
}

#[no_mangle]
pub extern "C" fn cublasGetStatusName(s: u32) -> *const c_char {
    status_text(s).0.as_ptr()
}

#[no_mangle]
pub extern "C" fn cublasGetStatusString(s: u32) -> *const c_char {
    status_text(s).1.as_ptr()
}

/// A status's name and description, NUL-terminated.
fn status_text(s: u32) -> (&'static std::ffi::CStr, &'static std::ffi::CStr) {
    match s {
        status::SUCCESS => (c"CUBLAS_STATUS_SUCCESS", c"success"),
        status::NOT_INITIALIZED => (c"CUBLAS_STATUS_NOT_INITIALIZED", c"the library was not initialized"),
        status::ALLOC_FAILED => (c"CUBLAS_STATUS_ALLOC_FAILED", c"the resource allocation failed"),
        status::INVALID_VALUE => (c"CUBLAS_STATUS_INVALID_VALUE", c"an invalid numeric value was used as an argument"),
        status::EXECUTION_FAILED => (c"CUBLAS_STATUS_EXECUTION_FAILED", c"the GPU program failed to execute"),
        status::INTERNAL_ERROR => (c"CUBLAS_STATUS_INTERNAL_ERROR", c"an internal operation failed"),
        status::NOT_SUPPORTED => (c"CUBLAS_STATUS_NOT_SUPPORTED", c"the functionality requested is not supported"),
        _ => (c"CUBLAS_STATUS_UNKNOWN", c"unknown error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_a_name() {
        for s in [0, 1, 3, 7, 13, 14, 15] {
            assert_ne!(status_text(s).0, c"CUBLAS_STATUS_UNKNOWN", "{s}");
        }
    }

    #[test]
    fn evenly_spaced_matrices_are_found() {
        assert_eq!(evenly_spaced(&[0x1000, 0x1040, 0x1080], 8), Some((0x1000, 8)));
        assert_eq!(evenly_spaced(&[0x1000], 8), Some((0x1000, 0)));
        assert_eq!(evenly_spaced(&[], 8), None);
        assert_eq!(evenly_spaced(&[0x1000, 0x1040, 0x1088], 8), None, "uneven");
        assert_eq!(evenly_spaced(&[0x1080, 0x1040, 0x1000], 8), None, "descending");
        assert_eq!(evenly_spaced(&[0x1000, 0x1000], 8), Some((0x1000, 0)), "the same matrix twice");
        assert_eq!(evenly_spaced(&[0x1000, 0x1006], 4), None, "not by whole elements");
    }
}
