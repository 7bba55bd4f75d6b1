//! CUDA C to cubin with NVRTC, cached by content hash.
//!
//! Sources are compiled for the device's own architecture (`sm_XY`) straight to a cubin, so
//! loading needs no JIT and works whatever PTX version the driver accepts. The cache key is
//! the SHA-256 of the architecture, the options and the source: every session (and every GPU
//! of the same architecture) that loads the same kernel pays for one compile. NVRTC needs no
//! GPU, so all of this runs, and is tested, on machines without one.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex};

use ac_proto::backend::{ErrorKind, WireError};

use super::nvrtc_loader::{nvrtc, Code, Nvrtc};
use crate::device::DeviceResult;

/// A compiled image.
pub type Cubin = Arc<Vec<u8>>;

/// Whether NVRTC was found (see [`nvrtc_loader`](super::nvrtc_loader)).
pub fn nvrtc_present() -> bool {
    nvrtc().is_some()
}

/// NVRTC's version and the library it was loaded from, when it is present.
pub fn version() -> Option<((i32, i32), String)> {
    let api = nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers.
    let code = unsafe { (api.version)(&mut major, &mut minor) };
    (code == 0).then(|| ((major, minor), api.found.clone()))
}

/// Compiles and remembers; shared by every GPU of the backend.
#[derive(Debug)]
pub struct Compiler {
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    images: HashMap<[u8; 32], Cubin>,
    order: VecDeque<[u8; 32]>,
    bytes: usize,
    budget: usize,
    compiles: u64,
}

impl Compiler {
    /// A compiler whose cache holds at most `budget` bytes of images (oldest go first).
    pub fn new(budget: usize) -> Self {
        Self { cache: Mutex::new(Cache { budget, ..Cache::default() }) }
    }

    /// Compiles `source` for compute capability `arch`, or returns the cached image.
    pub fn compile(&self, source: &str, options: &[String], arch: (u32, u32)) -> DeviceResult<Cubin> {
        check_untrusted(source, options)?;
        let key = cache_key(source, options, arch);
        if let Some(image) = self.cache.lock().expect("cache poisoned").images.get(&key) {
            return Ok(image.clone());
        }
        // Compile without the lock: compiles take hundreds of milliseconds, and two sessions
        // compiling the same source at once only waste one compile.
        let image = Arc::new(compile_uncached(source, options, arch)?);
        self.cache.lock().expect("cache poisoned").insert(key, image.clone());
        Ok(image)
    }

    /// How many compiles actually ran (cache misses).
    pub fn compiles(&self) -> u64 {
        self.cache.lock().expect("cache poisoned").compiles
    }
}

impl Cache {
    fn insert(&mut self, key: [u8; 32], image: Cubin) {
        self.compiles += 1;
        if self.images.contains_key(&key) {
            return;
        }
        self.bytes += image.len();
        self.images.insert(key, image);
        self.order.push_back(key);
        while self.bytes > self.budget && self.order.len() > 1 {
            let oldest = self.order.pop_front().expect("not empty");
            if let Some(old) = self.images.remove(&oldest) {
                self.bytes -= old.len();
            }
        }
    }
}

fn cache_key(source: &str, options: &[String], arch: (u32, u32)) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(format!("sm_{}{}\0", arch.0, arch.1).as_bytes());
    for option in options {
        ctx.update(option.as_bytes());
        ctx.update(b"\0");
    }
    ctx.update(b"\0");
    ctx.update(source.as_bytes());
    ctx.finish().as_ref().try_into().expect("SHA-256 is 32 bytes")
}

fn compile_error(message: impl Into<String>) -> WireError {
    WireError::new(ErrorKind::ModuleLoad, message)
}

fn nvrtc_check(api: &Nvrtc, call: &str, code: Code) -> DeviceResult<()> {
    match code {
        0 => Ok(()),
        code => Err(compile_error(format!("{call}: {}", api.error_string(code)))),
    }
}

/// An NVRTC program, destroyed on drop.
struct Program {
    api: &'static Nvrtc,
    raw: super::nvrtc_loader::Program,
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed only here.
        unsafe { (self.api.destroy_program)(&mut self.raw) };
    }
}

impl Program {
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: valid program and out-pointer.
        if unsafe { (self.api.get_program_log_size)(self.raw, &mut size) } != 0 || size == 0 {
            return String::new();
        }
        let mut log = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes, as NVRTC asked.
        unsafe { (self.api.get_program_log)(self.raw, log.as_mut_ptr() as *mut c_char) };
        String::from_utf8_lossy(&log).trim_end_matches('\0').trim_end().to_string()
    }

    fn ptx(&self) -> DeviceResult<Vec<u8>> {
        let mut size = 0usize;
        // SAFETY: valid program and out-pointer.
        nvrtc_check(self.api, "nvrtcGetPTXSize", unsafe { (self.api.get_ptx_size)(self.raw, &mut size) })?;
        let mut text = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes, as NVRTC asked (the text and its NUL).
        let code = unsafe { (self.api.get_ptx)(self.raw, text.as_mut_ptr() as *mut c_char) };
        nvrtc_check(self.api, "nvrtcGetPTX", code)?;
        Ok(text)
    }

    fn cubin(&self) -> DeviceResult<Vec<u8>> {
        let mut size = 0usize;
        // SAFETY: valid program and out-pointer.
        nvrtc_check(self.api, "nvrtcGetCUBINSize", unsafe { (self.api.get_cubin_size)(self.raw, &mut size) })?;
        let mut image = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes, as NVRTC asked.
        let code = unsafe { (self.api.get_cubin)(self.raw, image.as_mut_ptr() as *mut c_char) };
        nvrtc_check(self.api, "nvrtcGetCUBIN", code)?;
        Ok(image)
    }
}

/// Options a client may pass: code generation and macros. Anything that makes NVRTC read files
/// (`-I`, `--pre-include`, ...) is refused, as is the architecture (it is the device's).
const ALLOWED_OPTIONS: &[&str] = &[
    "-D",
    "--define-macro",
    "-U",
    "--undefine-macro",
    "-std=",
    "--std=",
    "-use_fast_math",
    "--use_fast_math",
    "-ftz=",
    "--ftz=",
    "-prec-div=",
    "--prec-div=",
    "-prec-sqrt=",
    "--prec-sqrt=",
    "-fmad=",
    "--fmad=",
    "-maxrregcount=",
    "--maxrregcount=",
    "-lineinfo",
    "--generate-line-info",
    "-G",
    "--device-debug",
    "-w",
    "--disable-warnings",
    "-restrict",
    "--restrict",
    "-default-device",
    "--extra-device-vectorization",
    "-dopt=",
    "--dopt=",
];

/// Refuses what would make the compiler read the backend's files: `#include`, `#embed`,
/// `#import` and `__has_include` in the source (whose contents a compile log would echo back),
/// and options outside [`ALLOWED_OPTIONS`]. Programs inline their headers instead.
pub fn check_untrusted(source: &str, options: &[String]) -> DeviceResult<()> {
    if let Some(option) = options.iter().find(|o| !ALLOWED_OPTIONS.iter().any(|a| o.starts_with(a))) {
        return Err(compile_error(format!(
            "compile option `{option}` is not allowed (macros and code generation only)"
        )));
    }
    // The compiler's first phases, in its order: trigraphs (which `-std=c++03/11/14`
    // turn on: `??=include` is an `#include`, `??/` a backslash), line splicing, comments.
    let code = source.replace("??=", "#").replace("??/", "\\");
    let code = strip_comments(&code.replace("\\\r\n", "").replace("\\\n", ""));
    if code.contains("__has_include") {
        return Err(compile_error("`__has_include` is not allowed: the backend's files are not yours to read"));
    }
    for line in code.lines() {
        let line = line.trim_start();
        let Some(rest) = line.strip_prefix('#').or_else(|| line.strip_prefix("%:")) else { continue };
        let directive = rest.trim_start();
        if ["include", "embed", "import"].iter().any(|d| directive.starts_with(d)) {
            return Err(compile_error(
                "`#include` is not allowed in CUDA C sent to the backend: inline the header's code instead",
            ));
        }
    }
    Ok(())
}

/// The source with comments replaced by a space (strings are not parsed, so a `//` or `/*` in a
/// string literal hides the rest: that only ever refuses more).
pub(super) fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
            out.push(' ');
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
            out.push(' ');
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// What a compile produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Machine code for one architecture (`sm_XY`).
    Cubin((u32, u32)),
    /// PTX for a virtual architecture (`compute_XY`) and newer, NUL-terminated.
    Ptx((u32, u32)),
}

fn compile_uncached(source: &str, options: &[String], arch: (u32, u32)) -> DeviceResult<Vec<u8>> {
    compile_to(source, options, Target::Cubin(arch))
}

/// Compiles `source` to `target` without the cache (also makes the prebuilt builtin images).
pub fn compile_to(source: &str, options: &[String], target: Target) -> DeviceResult<Vec<u8>> {
    let Some(api) = nvrtc() else {
        return Err(WireError::new(
            ErrorKind::NeedsCuda,
            "CUDA C needs NVRTC (libnvrtc.so, .so.13 or .so.12, or the library AC_BACKEND_NVRTC names), \
             which the backend host lacks; load PTX or a cubin instead",
        ));
    };
    let source = CString::new(source).map_err(|_| compile_error("the CUDA C source contains a NUL byte"))?;
    let mut all = vec![match target {
        Target::Cubin((major, minor)) => format!("--gpu-architecture=sm_{major}{minor}"),
        Target::Ptx((major, minor)) => format!("--gpu-architecture=compute_{major}{minor}"),
    }];
    all.extend(options.iter().cloned());
    let all: Vec<CString> = all
        .into_iter()
        .map(CString::new)
        .collect::<Result<_, _>>()
        .map_err(|_| compile_error("a compile option contains a NUL byte"))?;
    let pointers: Vec<*const c_char> = all.iter().map(|o| o.as_ptr()).collect();
    let mut raw = std::ptr::null_mut();
    // SAFETY: NUL-terminated source and name; no headers.
    let code = unsafe {
        (api.create_program)(&mut raw, source.as_ptr(), c"module.cu".as_ptr(), 0, std::ptr::null(), std::ptr::null())
    };
    nvrtc_check(api, "nvrtcCreateProgram", code)?;
    let program = Program { api, raw };
    // SAFETY: the options outlive the call.
    let code = unsafe { (api.compile_program)(program.raw, pointers.len() as i32, pointers.as_ptr()) };
    if code != 0 {
        return Err(compile_error(format!("NVRTC compile failed ({}):\n{}", api.error_string(code), program.log())));
    }
    match target {
        Target::Cubin(_) => program.cubin(),
        Target::Ptx(_) => program.ptx(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_covers_source_options_and_architecture() {
        let base = cache_key("src", &["-DX=1".into()], (9, 0));
        assert_eq!(base, cache_key("src", &["-DX=1".into()], (9, 0)));
        assert_ne!(base, cache_key("src2", &["-DX=1".into()], (9, 0)));
        assert_ne!(base, cache_key("src", &["-DX=2".into()], (9, 0)));
        assert_ne!(base, cache_key("src", &["-DX=1".into()], (8, 0)));
        // Option boundaries count: ["ab"] is not ["a", "b"].
        assert_ne!(cache_key("s", &["ab".into()], (9, 0)), cache_key("s", &["a".into(), "b".into()], (9, 0)));
    }

    #[test]
    fn sources_and_options_that_read_files_are_refused() {
        let ok = "extern \"C\" __global__ void k(float* x) { x[0] = N; } // no includes here";
        assert!(check_untrusted(ok, &["-DN=1".into(), "--use_fast_math".into(), "-std=c++17".into()]).is_ok());
        for bad in [
            "#include \"/etc/passwd\"\n",
            "  #  include <x>\n",
            "#/* hidden */include \"a\"\n",
            "#\\\ninclude \"a\"\n",
            "%:include \"a\"\n",
            "#embed \"/etc/passwd\"\n",
            "#if __has_include(\"/etc/shadow\")\n#endif\n",
            // Trigraphs: NVRTC 12.9 reads these as `#include` under `-std=c++03/11/14`.
            "??=include \"/etc/passwd\"\n",
            "#??/\ninclude \"a\"\n",
            "??=??/\ninclude \"a\"\n",
        ] {
            assert_eq!(check_untrusted(bad, &[]).unwrap_err().kind, ErrorKind::ModuleLoad, "{bad:?}");
        }
        for option in ["-I/etc", "--include-path=/", "--pre-include=/etc/passwd", "-arch=sm_50", "--gpu-architecture=x"]
        {
            assert!(check_untrusted(ok, &[option.into()]).is_err(), "{option}");
        }
        assert!(check_untrusted("int a; /* #include \"x\" */", &[]).is_ok(), "commented out");
    }

    #[test]
    fn the_cache_stays_within_its_budget() {
        let mut cache = Cache { budget: 10, ..Cache::default() };
        cache.insert([1; 32], Arc::new(vec![0; 6]));
        cache.insert([2; 32], Arc::new(vec![0; 6]));
        assert!(!cache.images.contains_key(&[1; 32]) && cache.images.contains_key(&[2; 32]));
        assert_eq!(cache.bytes, 6);
    }
}
