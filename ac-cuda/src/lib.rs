//! `libcuda.so.1` for unmodified CUDA programs: the CUDA driver API, served by the job's
//! remote accelerators through the offload SDK.
//!
//! A CUDA program, the CUDA runtime linked into it (statically, as `nvcc` does by default),
//! and the libraries built on CUDA all end in the driver API, one stable C ABI. Found first
//! through `LD_LIBRARY_PATH`, this library answers it: the program's CUDA devices are its
//! job's accelerators (`AC_Init`'s static set, plus `AC_GET=N` more asked at start), memory
//! and copies go over the SDK's data plane and lanes, kernels run on the remote GPU.
//!
//! # Layout
//! - [`state`]: the process's session, its devices, and the handles the program holds
//!   (contexts, modules, kernels, streams, events), each checked before use.
//! - [`uuid`]: a device's UUID, from its accelerator's id, and its text.
//! - [`visible`]: `CUDA_VISIBLE_DEVICES`, which of the job's accelerators the process opens.
//! - [`children`]: children forked after NVML open sessions of their own; one that dies without
//!   closing them has them ended by its parent.
//! - [`init`]: `cuInit`, versions, device queries (answered locally from what the session
//!   learned at open), errors' names and strings.
//! - [`context`]: primary contexts and the per-thread context stack, kept locally;
//!   [`context::settings`], their flags, bank size and the profiler's start and stop.
//! - [`limits`]: a context's limits (`cuCtxSetLimit`: stack, printf buffer, heap), set on the
//!   remote GPU.
//! - [`memory`]: allocations (by device address), memsets and copies; [`pointer`], what an
//!   address's attributes are.
//! - [`managed`]: managed memory, a remote allocation and host memory mapped at its address,
//!   kept one by sending and bringing back around the device's work.
//! - [`pitched`]: 2D and 3D copies and 2D memsets, cut into runs of [`memory`]'s.
//! - [`batch`]: batches of copies (`cuMemcpyBatchAsync`), each [`memory`]'s, checked whole.
//! - [`pool`]: memory pools, kept here: blocks freed to a pool stay allocated on the device
//!   and are handed out again in stream order (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`).
//! - [`peer`]: peer queries and copies between two devices' memory (staged through the host).
//! - [`module`]: module and library images (fat binaries, cubins, PTX), kernel lookups.
//! - [`attributes`]: a kernel's attributes, the device's answer and what the program sets (a
//!   dynamic shared memory limit past 48 KiB, sent to the backend).
//! - [`occupancy`]: occupancy queries, from the architecture's limits as CUDA's calculator
//!   counts them.
//! - [`launch`]: `cuLaunchKernel` and friends: arguments sized by the kernel's parameter layout;
//!   [`legacy_launch`], CUDA 2.0's `cuParamSet*` and `cuLaunchGrid`, launched through it.
//! - [`tensor_map`]: tensor maps (TMA descriptors), encoded by the remote driver and kept here.
//! - [`stream`]: streams and events; [`stream::attributes`], a stream's attributes (an access
//!   policy window, its synchronization policy), kept and answered here.
//! - [`graph`]: CUDA graphs and stream capture, kept here: a node is its call, run again on the
//!   launch's stream; an executable graph its nodes in dependency order.
//! - [`procs`]: `cuGetProcAddress`, by name and version.
//! - [`driver_log`]: the driver's error log: the shim's reasons for failed calls, in NVIDIA's
//!   form, kept and handed to the program's callbacks; [`logs`], its entry points (`cuLogs*`).
//! - [`export_tables`]: the runtime's private tables (`cuGetExportTable`), served locally;
//!   [`integrity`] is the check one of them computes.
//! - [`blas`]: cuBLAS and cuBLASLt (gemms, level 1 and 2, matmuls), for programs linked
//!   against `libcublas`/`libcublasLt` (this library is installed under those names too), on
//!   the backend's builtin gemm kernels.
//! - [`fft`]: cuFFT's plans and executions, for programs linked against `libcufft` (installed
//!   under that name too), on the backend's builtin DFT kernels.
//! - [`nvml`]: NVML (`libnvidia-ml.so.1`, installed under that name too) for the same devices:
//!   their count, handles, names, UUIDs, PCI locations, capabilities and memory.
//! - [`builtins`]: what those two need of each device: the builtin kernels, scratch buffers.
//! - [`image`]: lengths of the images the driver is handed without one.
//! - `blas_generated.rs`, `fft_generated.rs` and `nvml_generated.rs` (by
//!   `scripts/gen-library-exports`): every other function of `cublas_api.h` and `cublasLt.h`,
//!   of `cufft.h` and `cufftXt.h`, and of `nvml.h`, answering "not supported" and naming itself
//!   once on stderr; and `blas/ilp64_generated.rs`, cuBLAS's `_64` forms of the functions the
//!   shim serves, each calling its 32-bit form.
//! - `generated.rs` (by `scripts/gen-cuda-exports`): every other entry point of `cuda.h`,
//!   answering `CUDA_ERROR_NOT_SUPPORTED` and naming itself once on stderr.
//!
//! # Invariants
//! - No entry point panics across the C boundary: each body runs under [`guard`].
//! - A handle from the program is looked up in its registry before use; a stale or forged
//!   one is `CUDA_ERROR_INVALID_HANDLE`, never a dereference.
//! - Asynchronous calls (launches, memsets, async copies) return without a round trip; their
//!   errors surface at the next synchronizing call, as the SDK's ordering model says.

#![allow(non_snake_case)] // the driver API's names
#![allow(clippy::missing_safety_doc)] // every entry point is the driver API's, documented by NVIDIA

pub mod array;
pub mod attributes;
pub mod batch;
pub mod blas;
#[rustfmt::skip] // as scripts/gen-library-exports writes it
pub mod blas_generated;
pub mod builtins;
pub mod children;
pub mod context;
pub mod copies;
pub mod driver_log;
pub mod error;
pub mod export_tables;
pub mod fft;
#[rustfmt::skip] // as scripts/gen-library-exports writes it
pub mod fft_generated;
#[rustfmt::skip] // as scripts/gen-cuda-exports writes it
pub mod generated;
pub mod graph;
pub mod image;
pub mod init;
pub mod integrity;
pub mod ipc;
pub mod launch;
pub mod launch_config;
pub mod legacy_launch;
pub mod limits;
pub mod logs;
pub mod managed;
pub mod memory;
pub mod module;
pub mod nvml;
#[rustfmt::skip] // as scripts/gen-library-exports writes it
pub mod nvml_generated;
pub mod occupancy;
pub mod peer;
pub mod pitched;
pub mod pointer;
pub mod pool;
pub mod procs;
pub mod state;
pub mod stream;
pub mod tensor_map;
pub mod uuid;
pub mod visible;
pub mod vmm;

pub use error::{CuResult, Error};

/// Runs an entry point's body: its error becomes the call's `CUresult`, and a panic (a bug)
/// becomes `CUDA_ERROR_UNKNOWN` with a line on stderr instead of unwinding into C.
pub fn guard(call: &str, body: impl FnOnce() -> Result<(), Error>) -> u32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => error::code::SUCCESS,
        Ok(Err(e)) => e.report(call),
        Err(_) => {
            eprintln!("ac-cuda: {call} failed unexpectedly (a bug in the shim)");
            driver_log::record(driver_log::Level::Error, call, "failed unexpectedly (a bug in the shim)");
            error::code::UNKNOWN
        }
    }
}

/// The answer of an entry point the shim does not implement: `CUDA_ERROR_NOT_SUPPORTED`, its
/// name on stderr the first time.
pub fn not_supported(name: &'static str) -> u32 {
    say_unsupported_once(name, "CUDA_ERROR_NOT_SUPPORTED");
    error::code::NOT_SUPPORTED
}

/// Names an unimplemented entry point on stderr, the first time it is called.
pub fn say_unsupported_once(name: &'static str, answer: &str) {
    static SAID: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let first = {
        let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
        let first = !said.contains(&name);
        if first {
            said.push(name);
        }
        first
    };
    // Said with the lock released: the log's callbacks are the program's, and may call here.
    if first {
        eprintln!("ac-cuda: {name} is not supported on remote accelerators ({answer})");
        driver_log::record(driver_log::Level::Error, name, &format!("not supported on remote accelerators ({answer})"));
    }
}

/// Defines each named entry point as a function answering `$answer(name)`: a library's "not
/// supported", its name said once. They take no parameters: on x86-64 and AArch64 the caller
/// cleans up its arguments, so a C caller passing any is unharmed.
#[macro_export]
macro_rules! answering {
    ($answer:path; $($name:ident),* $(,)?) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name() -> u32 {
                $answer(stringify!($name))
            }
        )*
    };
}

/// Defines each named entry point as [`not_supported`] (see [`answering`]).
#[macro_export]
macro_rules! not_supported {
    ($($name:ident),* $(,)?) => {
        $crate::answering!($crate::not_supported; $($name),*);
    };
}

/// Exports `alias` as a second name of `target` of the same signature (the per-thread-default-
/// stream variants, the shim's streams being the same either way, and older names such as
/// `cuLinkCreate` for `cuLinkCreate_v2`): a function
/// with no code of its own but a jump to `target`, registers and stack untouched, so that the
/// arguments reach `target` and its answer the caller. A Rust function, so that the library
/// exports it as it exports every entry point (an assembler alias was not exported, and a stub
/// of the same name answered "not supported" in its place).
#[macro_export]
macro_rules! per_thread_aliases {
    ($($alias:ident => $target:ident),* $(,)?) => {
        $(
            #[unsafe(naked)]
            #[no_mangle]
            pub extern "C" fn $alias() {
                $crate::jump_to!($target)
            }
        )*
    };
}

/// The tail jump of a [`per_thread_aliases`] function, through the PLT (the target is an
/// exported, so preemptible, symbol of this library).
#[cfg(target_arch = "x86_64")]
#[macro_export]
macro_rules! jump_to {
    ($target:ident) => {
        core::arch::naked_asm!(concat!("jmp ", stringify!($target), "@PLT"))
    };
}

/// The tail jump of a [`per_thread_aliases`] function.
#[cfg(target_arch = "aarch64")]
#[macro_export]
macro_rules! jump_to {
    ($target:ident) => {
        core::arch::naked_asm!(concat!("b ", stringify!($target)))
    };
}

#[cfg(test)]
mod tests {
    use std::ffi::{c_char, c_void};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// A log callback that makes an unserved call of its own, as a program's may.
    unsafe extern "C" fn calls_an_unserved_function(_: *mut c_void, _: driver_log::Level, _: *mut c_char, _: usize) {
        not_supported("cuTestInsideTheCallback");
    }

    #[test]
    fn a_log_callback_may_make_an_unserved_call() {
        driver_log::register(calls_an_unserved_function, std::ptr::null_mut());
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            not_supported("cuTestBeforeTheCallback");
            done.send(()).unwrap();
        });
        assert!(finished.recv_timeout(Duration::from_secs(30)).is_ok(), "the unserved call hung in its callback");
    }
}
