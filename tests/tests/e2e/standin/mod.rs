//! Loads the CUDA driver stand-in (`cuda-standin`, a test-only library that is not a GPU) in
//! place of `libcuda.so`, and reads what it saw.
//!
//! cudarc finds the driver with `dlopen("libcuda.so")` (then other names). The stand-in's
//! soname is `libcuda.so`, so once this process has loaded it by its path, the loader answers
//! cudarc with it. It must be loaded before the backend first asks for the driver (cudarc and
//! the backend remember the answer): every test calls [`exclusive`] first.
//!
//! The stand-in's state is the process's: tests that run in one process (`cargo test`) take
//! turns through [`exclusive`]; nextest runs each in a process of its own anyway.

// FFI: dlopen/dlsym from the C library, to load a test fixture and call its C functions.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

extern "C" {
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;

struct Library(*mut c_void);

// SAFETY: a dlopen handle is a process-wide token, usable from any thread.
unsafe impl Send for Library {}
// SAFETY: as above; it is never dereferenced here.
unsafe impl Sync for Library {}

fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let path = ac_tests::workspace_binary("libcuda_standin.so");
        let c_path = CString::new(path.to_string_lossy().as_bytes()).expect("path");
        // SAFETY: a NUL-terminated path; loading runs no code of the stand-in but statics'.
        let handle = unsafe { dlopen(c_path.as_ptr(), RTLD_NOW) };
        if handle.is_null() {
            // SAFETY: dlerror returns a NUL-terminated message after a failed dlopen.
            let why = unsafe { CStr::from_ptr(dlerror()) }.to_string_lossy().into_owned();
            panic!("cannot load the CUDA driver stand-in {}: {why}", path.display());
        }
        Library(handle)
    })
}

/// The stand-in's function `name`, of C type `F` (a function pointer type).
fn function<F: Copy>(name: &str) -> F {
    let c_name = CString::new(name).expect("name");
    // SAFETY: a live handle and a NUL-terminated name.
    let symbol = unsafe { dlsym(library().0, c_name.as_ptr()) };
    assert!(!symbol.is_null(), "the stand-in lacks {name}");
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: `F` is the function pointer type the stand-in exports under `name`.
    unsafe { std::mem::transmute_copy(&symbol) }
}

/// Loads the stand-in and takes this process's turn with it (held for the whole test), with
/// its switches at their defaults and no violation recorded.
pub async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    function::<extern "C" fn()>("standin_reset")();
    turn
}

/// Pinned host allocations the stand-in holds (not freed).
pub fn pinned_outstanding() -> usize {
    function::<extern "C" fn() -> usize>("standin_pinned_outstanding")()
}

/// Contexts alive in the stand-in, primary ones included.
pub fn contexts() -> usize {
    function::<extern "C" fn() -> usize>("standin_contexts")()
}

/// Panics with the stand-in's record if it saw the contract broken.
pub fn assert_no_violations() {
    let mut text = vec![0u8; 8192];
    let count = function::<unsafe extern "C" fn(*mut u8, usize) -> usize>("standin_violations");
    // SAFETY: the buffer holds `len` bytes.
    let n = unsafe { count(text.as_mut_ptr(), text.len()) };
    let text = String::from_utf8_lossy(&text).trim_end_matches('\0').to_string();
    assert_eq!(n, 0, "the CUDA driver stand-in saw the contract broken:\n{text}");
}

/// Whether `cuFuncGetParamInfo` answers (CUDA 12.4+ drivers) or not (older ones).
pub fn set_param_info(on: bool) {
    function::<extern "C" fn(c_int)>("standin_set_param_info")(on as c_int)
}

/// Whether a fault breaks every context created after it in the process.
pub fn set_fault_poisons_process(on: bool) {
    function::<extern "C" fn(c_int)>("standin_set_fault_poisons_process")(on as c_int)
}

/// Makes the host-to-device copy that takes the driver past `bytes` more fail, once.
pub fn fail_host_to_device_after(bytes: usize) {
    function::<extern "C" fn(usize)>("standin_fail_host_to_device_after")(bytes)
}

/// The stand-in's violations in session workers, which a test cannot call into: their program
/// is a wrapper around `ac-backend` that names a file for them (`CUDA_STANDIN_VIOLATIONS`), and
/// the file must be empty when the test ends. Dropped without [`WorkerRecord::assert_none`] in a
/// test that did not fail, it checks then.
pub struct WorkerRecord {
    dir: tempfile::TempDir,
    checked: bool,
}

impl WorkerRecord {
    pub fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("a directory for the worker program"), checked: false }
    }

    fn file(&self) -> std::path::PathBuf {
        self.dir.path().join("violations")
    }

    /// A session worker program: `ac-backend` with the violations file and `env` in its
    /// environment alone (the stand-in reads them when first called).
    pub fn program(&self, env: &[(&str, String)]) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let backend = ac_tests::workspace_binary("ac-backend");
        let script = self.dir.path().join("ac-backend-worker");
        let mut text = format!("#!/bin/sh\nexport CUDA_STANDIN_VIOLATIONS='{}'\n", self.file().display());
        for (name, value) in env {
            text += &format!("export {name}='{value}'\n");
        }
        text += &format!("exec '{}' \"$@\"\n", backend.display());
        std::fs::write(&script, text).expect("write the worker program");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("make it executable");
        script
    }

    /// Panics with what the session workers' stand-ins recorded, if anything.
    pub fn assert_none(&mut self) {
        self.checked = true;
        let text = std::fs::read_to_string(self.file()).unwrap_or_default();
        assert!(text.is_empty(), "the CUDA driver stand-in saw the contract broken in a session worker:\n{text}");
    }
}

impl Drop for WorkerRecord {
    fn drop(&mut self) {
        if !self.checked && !std::thread::panicking() {
            self.assert_none();
        }
    }
}

/// Whether `backend`'s sessions, and this process's session workers but those in `before`, are
/// all gone (within 10 s): what a worker's stand-in saw as its session was torn down is in its
/// record then.
pub async fn worker_gone(backend: &ac_backend::RunningBackend, before: &[u32]) -> bool {
    let limit = std::time::Duration::from_secs(10);
    let sessions_gone = ac_tests::eventually(limit, || async { backend.sessions() == 0 }).await;
    let workers_gone = || async { session_workers().iter().all(|p| before.contains(p)) };
    sessions_gone && ac_tests::eventually(limit, workers_gone).await
}

/// How many descriptors of the stand-in's physical memory files process `pid` holds: a session
/// worker's, one a piece of physical memory or import it holds; the backend's, one a piece
/// of physical memory it shares.
pub fn physical_files(pid: u32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return 0 };
    let links = fds.flatten().filter_map(|fd| std::fs::read_link(fd.path()).ok());
    links.filter(|link| link.to_string_lossy().starts_with("/memfd:cuda-standin-physical")).count()
}

/// This process's children that are session workers.
pub fn session_workers() -> Vec<u32> {
    let me = std::process::id();
    let tasks = std::fs::read_dir(format!("/proc/{me}/task")).expect("/proc");
    let children: String =
        tasks.flatten().map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default() + " ").collect();
    let pids = children.split_whitespace().filter_map(|p| p.parse::<u32>().ok());
    let is_worker = |pid: &u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == b"--session-worker"))
    };
    pids.filter(is_worker).collect()
}
