//! cuBLAS's and cuBLASLt's loggers: each call the shim answers is logged by name, to the
//! destinations the program (or the environment, as NVIDIA's libraries read it) chose.
//!
//! - cuBLAS: `cublasLoggerConfigure(on, stdout, stderr, file)` and `cublasSetLoggerCallback`
//!   (which turns logging on, as cuBLAS's does); `CUBLAS_LOGINFO_DBG=1` with
//!   `CUBLAS_LOGDEST_DBG=stdout|stderr|<file>`. Each call is a line `I! cuBLAS (ac-cuda):
//!   function <name> called`, and a failed one's `E! ... failed: status <s>` follows.
//! - cuBLASLt: `cublasLtLoggerSetLevel` (0 off .. 5 API trace), `SetMask` (1 errors, 16 API
//!   trace; the others, performance and heuristics traces, have nothing to log here),
//!   `SetCallback`, `SetFile`, `OpenFile` and `ForceDisable`; `CUBLASLT_LOG_LEVEL`,
//!   `CUBLASLT_LOG_MASK` and `CUBLASLT_LOG_FILE` (`%i` its process id). API trace lines are
//!   `[cublasLt][<pid>][Api][<name>] called`, a failed call's `[Error]` line gives its status;
//!   cuBLASLt writes to stdout unless given a file, and to neither once given a callback.
//!
//! A level-1 `Ex` form that runs as its typed entry point logs under that form's name
//! (`vectors_ex.rs`). A callback that calls cuBLAS again is not logged again (its calls would
//! log into it without end). Nothing is logged, and no lock taken, while both loggers are off.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::{guard, status};
use crate::error::{code, Error};
use crate::state::put;

/// `cublasLogCallback`.
type Callback = unsafe extern "C" fn(*const c_char);
/// `cublasLtLoggerCallback_t`: level, function, message.
type LtCallback = unsafe extern "C" fn(c_int, *const c_char, *const c_char);

/// cuBLASLt's mask bits the shim logs under.
const LT_ERRORS: c_int = 1;
const LT_API_TRACE: c_int = 16;

/// Where one library's lines are written.
#[derive(Debug, Default)]
struct Sinks {
    stdout: bool,
    stderr: bool,
    file: Option<File>,
    /// A C `FILE*` of the program's (`cublasLtLoggerSetFile`), 0 for none.
    stream: usize,
}

impl Sinks {
    /// Writes `line` and a newline to each destination; a failed write is dropped, as a
    /// logger's is.
    fn write(&mut self, line: &str) {
        if self.stdout {
            let _ = writeln!(std::io::stdout(), "{line}");
        }
        if self.stderr {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        if let Some(file) = &mut self.file {
            let _ = writeln!(file, "{line}");
        }
        if self.stream != 0 {
            if let Ok(text) = CString::new(format!("{line}\n")) {
                // SAFETY: the program gave this FILE* open for writing (cublasLtLoggerSetFile).
                unsafe {
                    libc::fputs(text.as_ptr(), self.stream as *mut libc::FILE);
                    libc::fflush(self.stream as *mut libc::FILE);
                }
            }
        }
    }
}

/// Both loggers' settings.
#[derive(Debug, Default)]
struct Logs {
    blas_on: bool,
    blas: Sinks,
    blas_callback: Option<Callback>,
    lt_mask: c_int,
    lt: Sinks,
    lt_callback: Option<LtCallback>,
    /// `cublasLtLoggerForceDisable`: off for the rest of the process.
    lt_disabled: bool,
}

impl Logs {
    /// The settings NVIDIA's libraries read from `env` at load.
    fn from_env(env: impl Fn(&str) -> Option<String>) -> Logs {
        let mut logs = Logs { lt: Sinks { stdout: true, ..Sinks::default() }, ..Logs::default() };
        if env("CUBLAS_LOGINFO_DBG").as_deref() == Some("1") {
            logs.blas_on = true;
            match env("CUBLAS_LOGDEST_DBG").as_deref() {
                Some("stdout") => logs.blas.stdout = true,
                Some("stderr") => logs.blas.stderr = true,
                Some(path) => logs.blas.file = File::create(path).ok(),
                None => {}
            }
        }
        if let Some(level) = env("CUBLASLT_LOG_LEVEL").and_then(|l| l.parse().ok()) {
            logs.lt_mask = level_mask(level).unwrap_or(0);
        }
        if let Some(mask) = env("CUBLASLT_LOG_MASK").and_then(|m| m.parse().ok()) {
            logs.lt_mask = mask;
        }
        if let Some(path) = env("CUBLASLT_LOG_FILE") {
            let path = path.replace("%i", &std::process::id().to_string());
            if let Ok(file) = File::create(path) {
                logs.lt = Sinks { file: Some(file), ..Sinks::default() };
            }
        }
        logs
    }

    /// Whether either library logs anything.
    fn active(&self) -> bool {
        self.blas_on || (self.lt_mask != 0 && !self.lt_disabled)
    }
}

/// The mask of cuBLASLt's log level `level` (each level logs its own and every lower one's).
fn level_mask(level: c_int) -> Option<c_int> {
    (0..=5).contains(&level).then(|| (1 << level) - 1)
}

/// Set while either logger is on: every call checks it, and takes the lock only then.
static ACTIVE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set on a thread while a program's logger callback runs on it.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Runs a program's logger callback, its own cuBLAS calls not logged.
fn calling_back(callback: impl FnOnce()) {
    IN_CALLBACK.with(|flag| flag.set(true));
    callback();
    IN_CALLBACK.with(|flag| flag.set(false));
}

fn logs() -> MutexGuard<'static, Logs> {
    static LOGS: OnceLock<Mutex<Logs>> = OnceLock::new();
    let logs = LOGS.get_or_init(|| {
        let logs = Logs::from_env(|name| std::env::var(name).ok());
        ACTIVE.store(logs.active(), Ordering::Relaxed);
        Mutex::new(logs)
    });
    logs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Changes the settings with `change`, then whether anything is logged.
fn configure(change: impl FnOnce(&mut Logs)) {
    let mut logs = logs();
    change(&mut logs);
    ACTIVE.store(logs.active(), Ordering::Relaxed);
}

/// Logs a call of `name` about to run, and (`status` not success) one that failed.
pub(super) fn log_call(name: &str, outcome: Option<u32>) {
    static LOADED: OnceLock<()> = OnceLock::new();
    LOADED.get_or_init(|| drop(logs()));
    if !ACTIVE.load(Ordering::Relaxed) || IN_CALLBACK.with(Cell::get) {
        return;
    }
    let is_lt = name.starts_with("cublasLt");
    let (line, level, message) = match (is_lt, outcome) {
        (false, None) => (format!("I! cuBLAS (ac-cuda): function {name} called"), 0, String::new()),
        (false, Some(s)) => (format!("E! cuBLAS (ac-cuda): function {name} failed: status {s}"), 0, String::new()),
        (true, None) => {
            (format!("[cublasLt][{}][Api][{name}] called", std::process::id()), LT_API_TRACE, "called".into())
        }
        (true, Some(s)) => {
            let message = format!("failed: status {s}");
            (format!("[cublasLt][{}][Error][{name}] {message}", std::process::id()), LT_ERRORS, message)
        }
    };
    let mut logs = logs();
    if !is_lt && logs.blas_on {
        logs.blas.write(&line);
        let callback = logs.blas_callback;
        drop(logs);
        if let (Some(callback), Ok(text)) = (callback, CString::new(line)) {
            // SAFETY: the program's callback, given a NUL-terminated line (cublasLogCallback).
            calling_back(|| unsafe { callback(text.as_ptr()) });
        }
    } else if is_lt && logs.lt_mask & level != 0 && !logs.lt_disabled {
        // A callback takes the lines in place of the file.
        let callback = logs.lt_callback;
        if callback.is_none() {
            logs.lt.write(&line);
        }
        drop(logs);
        let level = if level == LT_ERRORS { 1 } else { 5 };
        if let (Some(callback), Ok(function), Ok(message)) = (callback, CString::new(name), CString::new(message)) {
            // SAFETY: the program's callback, given NUL-terminated strings.
            calling_back(|| unsafe { callback(level, function.as_ptr(), message.as_ptr()) });
        }
    }
}

/// A file name of the program's, or `None` for a null pointer.
unsafe fn path(name: *const c_char) -> Result<Option<String>, Error> {
    if name.is_null() {
        return Ok(None);
    }
    let name = CStr::from_ptr(name).to_str().map_err(|_| Error::said(code::INVALID_VALUE, "a log file's name"))?;
    Ok(Some(name.to_owned()))
}

/// Creates the log file `name`.
fn create(name: &str) -> Result<File, Error> {
    File::create(name).map_err(|e| Error::said(code::INVALID_VALUE, format!("log file {name}: {e}")))
}

#[no_mangle]
pub unsafe extern "C" fn cublasLoggerConfigure(on: c_int, stdout: c_int, stderr: c_int, file: *const c_char) -> u32 {
    guard("cublasLoggerConfigure", || {
        let file = path(file)?.map(|name| create(&name)).transpose()?;
        configure(|logs| {
            logs.blas_on = on != 0;
            logs.blas = Sinks { stdout: stdout != 0, stderr: stderr != 0, file, stream: 0 };
        });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cublasSetLoggerCallback(callback: Option<Callback>) -> u32 {
    guard("cublasSetLoggerCallback", || {
        configure(|logs| {
            logs.blas_callback = callback;
            logs.blas_on |= callback.is_some();
        });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetLoggerCallback(callback: *mut Option<Callback>) -> u32 {
    guard("cublasGetLoggerCallback", || put(callback, logs().blas_callback))
}

#[no_mangle]
pub extern "C" fn cublasLtLoggerSetCallback(callback: Option<LtCallback>) -> u32 {
    guard("cublasLtLoggerSetCallback", || {
        configure(|logs| logs.lt_callback = callback);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cublasLtLoggerSetFile(file: *mut c_void) -> u32 {
    guard("cublasLtLoggerSetFile", || {
        if file.is_null() {
            return Err(Error::said(code::INVALID_VALUE, "a null FILE*"));
        }
        configure(|logs| logs.lt = Sinks { stream: file as usize, ..Sinks::default() });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cublasLtLoggerOpenFile(name: *const c_char) -> u32 {
    guard("cublasLtLoggerOpenFile", || {
        let name = path(name)?.ok_or_else(|| Error::said(code::INVALID_VALUE, "a null log file name"))?;
        let file = create(&name)?;
        configure(|logs| logs.lt = Sinks { file: Some(file), ..Sinks::default() });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cublasLtLoggerSetLevel(level: c_int) -> u32 {
    guard("cublasLtLoggerSetLevel", || {
        let mask = level_mask(level).ok_or_else(|| Error::said(code::INVALID_VALUE, format!("log level {level}")))?;
        configure(|logs| logs.lt_mask = mask);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cublasLtLoggerSetMask(mask: c_int) -> u32 {
    guard("cublasLtLoggerSetMask", || {
        configure(|logs| logs.lt_mask = mask);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cublasLtLoggerForceDisable() -> u32 {
    configure(|logs| logs.lt_disabled = true);
    status::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_masks_of_themselves_and_every_lower_level() {
        assert_eq!(level_mask(0), Some(0));
        assert_eq!(level_mask(1), Some(LT_ERRORS));
        assert_eq!(level_mask(5), Some(31), "API trace and all below");
        assert_eq!(level_mask(5).map(|m| m & LT_API_TRACE), Some(LT_API_TRACE));
        assert_eq!(level_mask(6), None);
        assert_eq!(level_mask(-1), None);
    }

    #[test]
    fn the_environment_turns_either_logger_on() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        let off = Logs::from_env(env(&[]));
        assert!(!off.active());
        assert!(off.lt.stdout, "cuBLASLt writes to stdout unless given a file");
        let blas = Logs::from_env(env(&[("CUBLAS_LOGINFO_DBG", "1"), ("CUBLAS_LOGDEST_DBG", "stderr")]));
        assert!(blas.active() && blas.blas.stderr && !blas.blas.stdout);
        assert!(!Logs::from_env(env(&[("CUBLAS_LOGINFO_DBG", "0")])).active());
        let lt = Logs::from_env(env(&[("CUBLASLT_LOG_LEVEL", "5")]));
        assert_eq!(lt.lt_mask, 31);
        let masked = Logs::from_env(env(&[("CUBLASLT_LOG_LEVEL", "5"), ("CUBLASLT_LOG_MASK", "1")]));
        assert_eq!(masked.lt_mask, LT_ERRORS, "a mask overrides the level");
        let disabled = Logs { lt_mask: 31, lt_disabled: true, ..Logs::default() };
        assert!(!disabled.active());
    }
}
