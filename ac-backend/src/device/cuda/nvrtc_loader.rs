//! Finds NVRTC and binds the calls the backend makes. cudarc looks for `libnvrtc.so` and
//! `libnvrtc.so.12` only, and a CUDA 13 host has `libnvrtc.so.13` (finding 2 of issue 24):
//! this tries a configured path first (`AC_BACKEND_NVRTC`), then every current name.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

/// NVRTC's names: unversioned (a toolkit's development link), then CUDA 13, 12 and 11.
pub const NAMES: &[&str] = &["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"];

/// The environment variable naming the NVRTC library to use.
pub const PATH_VARIABLE: &str = "AC_BACKEND_NVRTC";

/// An NVRTC program handle.
pub type Program = *mut c_void;

/// `nvrtcResult`: 0 is success.
pub type Code = c_int;

/// The NVRTC calls the backend makes, from the library it found.
#[allow(missing_docs)] // each field is the NVRTC function of the same name
pub struct Nvrtc {
    /// The library's path or name, as found.
    pub found: String,
    pub version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Code,
    pub create_program: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Code,
    pub compile_program: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Code,
    pub get_program_log_size: unsafe extern "C" fn(Program, *mut usize) -> Code,
    pub get_program_log: unsafe extern "C" fn(Program, *mut c_char) -> Code,
    pub get_cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Code,
    pub get_cubin: unsafe extern "C" fn(Program, *mut c_char) -> Code,
    pub get_ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Code,
    pub get_ptx: unsafe extern "C" fn(Program, *mut c_char) -> Code,
    pub destroy_program: unsafe extern "C" fn(*mut Program) -> Code,
    get_error_string: unsafe extern "C" fn(Code) -> *const c_char,
    _library: libloading::Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc").field("found", &self.found).finish()
    }
}

impl Nvrtc {
    /// NVRTC's name for a result, e.g. `NVRTC_ERROR_COMPILATION`.
    pub fn error_string(&self, code: Code) -> String {
        // SAFETY: NVRTC returns a static NUL-terminated string for any code.
        let text = unsafe { (self.get_error_string)(code) };
        if text.is_null() {
            return format!("NVRTC error {code}");
        }
        // SAFETY: as above.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }
}

/// The libraries to try, in order: the configured one, then [`NAMES`].
pub fn candidates(configured: Option<String>) -> Vec<String> {
    configured.into_iter().chain(NAMES.iter().map(|n| n.to_string())).collect()
}

/// NVRTC, when one of the candidates loads and has every call.
pub fn nvrtc() -> Option<&'static Nvrtc> {
    static NVRTC: OnceLock<Option<Nvrtc>> = OnceLock::new();
    NVRTC
        .get_or_init(|| {
            let configured = std::env::var(PATH_VARIABLE).ok().filter(|p| !p.is_empty());
            candidates(configured).into_iter().find_map(|candidate| match load(&candidate) {
                Ok(nvrtc) => Some(nvrtc),
                Err(e) => {
                    tracing::debug!(%candidate, error = %e, "NVRTC not loaded");
                    None
                }
            })
        })
        .as_ref()
}

fn load(path: &str) -> Result<Nvrtc, libloading::Error> {
    // SAFETY: loading NVRTC runs its initialisers only; every symbol is bound with the type
    // NVRTC's header declares for it.
    unsafe {
        let library = libloading::Library::new(path)?;
        Ok(Nvrtc {
            found: path.to_string(),
            version: *library.get(b"nvrtcVersion\0")?,
            create_program: *library.get(b"nvrtcCreateProgram\0")?,
            compile_program: *library.get(b"nvrtcCompileProgram\0")?,
            get_program_log_size: *library.get(b"nvrtcGetProgramLogSize\0")?,
            get_program_log: *library.get(b"nvrtcGetProgramLog\0")?,
            get_cubin_size: *library.get(b"nvrtcGetCUBINSize\0")?,
            get_cubin: *library.get(b"nvrtcGetCUBIN\0")?,
            get_ptx_size: *library.get(b"nvrtcGetPTXSize\0")?,
            get_ptx: *library.get(b"nvrtcGetPTX\0")?,
            destroy_program: *library.get(b"nvrtcDestroyProgram\0")?,
            get_error_string: *library.get(b"nvrtcGetErrorString\0")?,
            _library: library,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_path_comes_first_then_every_current_name() {
        let list = candidates(Some("/opt/cuda-13/lib64/libnvrtc.so.13".into()));
        assert_eq!(list[0], "/opt/cuda-13/lib64/libnvrtc.so.13");
        assert!(list.contains(&"libnvrtc.so.13".to_string()) && list.contains(&"libnvrtc.so.12".to_string()));
        assert_eq!(candidates(None).len(), NAMES.len());
        assert!(load("/nonexistent/libnvrtc.so").is_err());
    }
}
