//! What a program's kernels print (CUDA's device-side `printf`, backend protocol 11): the
//! backend sends it ahead of the next reply after the device wrote it out, and it is written to
//! this process's standard output before that reply is handed to its caller, so a program sees
//! its kernels' lines before its synchronizing call returns, as with a local GPU.

use std::io::Write;
use std::sync::RwLock;

/// Where kernel output goes, when not to Rust's standard output.
type Sink = fn(&[u8]);

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// Sends kernel output to `sink` instead of Rust's standard output: a C library (the CUDA shim,
/// `libac`) writes it through C's `stdout`, so that it keeps its place among the program's own
/// `printf` lines. The sink runs on whichever thread reads the session's replies, before the
/// reply after the output is handed over: it must not call the SDK, and while it blocks, so do
/// that accelerator's calls (the default sink blocks on a full standard output, as a program's
/// own `println!` would).
pub fn set_kernel_output(sink: fn(&[u8])) {
    *SINK.write().unwrap_or_else(|p| p.into_inner()) = Some(sink);
}

/// Writes kernel output where [`set_kernel_output`] said (standard output by default).
pub(crate) fn deliver(bytes: &[u8]) {
    match *SINK.read().unwrap_or_else(|p| p.into_inner()) {
        Some(sink) => sink(bytes),
        None => {
            let mut out = std::io::stdout().lock();
            // A closed standard output loses the kernels' lines, as it would lose the
            // program's own.
            let _ = out.write_all(bytes).and_then(|()| out.flush());
        }
    }
}

/// Writes kernel output through C's `stdout`, where a C program's own `printf` lines go, so that
/// both keep their order (as the CUDA driver writes its printf buffer): the sink of the CUDA
/// shim and of `libac` ([`set_kernel_output`]).
#[allow(unsafe_code)] // C's stdout, from the C library
pub fn print_through_c_stdout(bytes: &[u8]) {
    extern "C" {
        static mut stdout: *mut libc::FILE;
    }
    // SAFETY: the C library's `stdout` is a valid stream for the process's life; fwrite and
    // fflush lock it against the program's own calls.
    unsafe {
        let out = std::ptr::addr_of!(stdout).read();
        libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), out);
        libc::fflush(out);
    }
}
