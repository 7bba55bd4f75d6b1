//! Linking (`cuLinkCreate_v2`, `cuLinkAddData_v2`, `cuLinkComplete`, `cuLinkDestroy`), as the
//! backend links for the CUDA shim's `cuLinkComplete`. The stand-in's linker reads each input's
//! kernels (PTX, cubins and fat binaries, as it reads a module's image), resolves PTX's external
//! functions (`.extern .func`) against those the inputs define, and makes a PTX image declaring
//! every kernel, which its `cuModuleLoadData` loads and its registered kernels run. It checks
//! the contract on the way: PTX NUL-terminated within its size, a link used in the context it
//! was made in, each log buffer given with its size. It writes its info log when verbosity
//! reached it, from the link's options or an input's.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::LazyLock;

use parking_lot::Mutex;

use crate::{code, id, kernels, state, with_context, Handle};

/// `CUjit_option`s the stand-in reads.
const INFO_LOG_BUFFER: c_int = 3;
const INFO_LOG_BUFFER_SIZE_BYTES: c_int = 4;
const ERROR_LOG_BUFFER: c_int = 5;
const ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;
const LOG_VERBOSE: c_int = 12;

/// `CUjitInputType`s: PTX, and one past NVVM.
const INPUT_PTX: c_uint = 1;
const INPUT_TYPES: c_uint = 6;

/// A pending link.
struct Link {
    context: u64,
    inputs: Vec<(String, c_uint, Vec<u8>)>,
    info: (usize, usize),
    errors: (usize, usize),
    verbose: bool,
    image: Option<Vec<u8>>,
}

static LINKS: LazyLock<Mutex<HashMap<u64, Link>>> = LazyLock::new(Mutex::default);

/// Runs `body` on link `state`, checked to be the current context's.
fn with_link(call: &str, state: Handle, body: impl FnOnce(&mut Link) -> Result<(), u32>) -> u32 {
    with_context(call, |d, context| {
        let mut links = LINKS.lock();
        let link = links.get_mut(&id(state)).ok_or(code::INVALID_HANDLE)?;
        if link.context != context {
            d.violation(format!("{call}: a link of another context used"));
            return Err(code::INVALID_CONTEXT);
        }
        body(link)
    })
}

/// Writes `text` into a log buffer `(address, capacity)`, cut to fit and NUL-terminated.
unsafe fn write_log((buffer, capacity): (usize, usize), text: &str) {
    if buffer == 0 || capacity == 0 {
        return;
    }
    let n = text.len().min(capacity - 1);
    std::ptr::copy_nonoverlapping(text.as_ptr(), buffer as *mut u8, n);
    *(buffer as *mut u8).add(n) = 0;
}

/// The functions a PTX text defines (`.func name`, visible or not) and those it declares
/// external (`.extern .func`), by name.
fn functions(ptx: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut defined, mut external) = (BTreeSet::new(), BTreeSet::new());
    for line in ptx.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == ".func") else { continue };
        // The name follows the return parameter, if any: `.func (.param .b32 r) name(`.
        let rest = words[at + 1..].join(" ");
        let rest = match rest.strip_prefix('(') {
            Some(after) => after.split_once(')').map_or("", |(_, name)| name),
            None => &rest,
        };
        let name: String =
            rest.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$').collect();
        if name.is_empty() {
            continue;
        }
        if words[..at].contains(&".extern") {
            external.insert(name);
        } else {
            defined.insert(name);
        }
    }
    (defined, external)
}

/// Links `inputs`: a PTX image declaring every kernel, or the error log.
fn link_inputs(inputs: &[(String, c_uint, Vec<u8>)]) -> Result<(Vec<u8>, String), String> {
    let (mut names, mut defined, mut needed) = (Vec::new(), BTreeSet::new(), Vec::new());
    for (name, kind, bytes) in inputs {
        let image = if bytes.starts_with(&kernels::FATBIN_MAGIC.to_le_bytes()) {
            let (arch, minor) = state::COMPUTE_CAPABILITY;
            kernels::fatbin_image(bytes, arch * 10 + minor).map_err(|_| format!("cannot read fat binary '{name}'"))?
        } else {
            bytes
        };
        let kernels = kernels::names(image).ok_or_else(|| format!("cannot read input '{name}' (type {kind})"))?;
        names.extend(kernels);
        if let Ok(ptx) = std::str::from_utf8(image) {
            let (own, external) = functions(ptx);
            defined.extend(own);
            needed.extend(external.into_iter().map(|f| (f, name.clone())));
        }
    }
    if let Some((f, input)) = needed.iter().find(|(f, _)| !defined.contains(f)) {
        return Err(format!("nvlink error   : Undefined reference to '{f}' in '{input}'"));
    }
    let (arch, minor) = state::COMPUTE_CAPABILITY;
    let mut ptx = format!(".version 8.0\n.target sm_{arch}{minor}\n.address_size 64\n// linked by cuda-standin\n");
    for kernel in &names {
        ptx.push_str(&format!(".visible .entry {kernel}()\n{{\n\tret;\n}}\n"));
    }
    ptx.push('\0');
    let log = format!("cuda-standin: linked {} inputs, {} kernels, for sm_{arch}{minor}", inputs.len(), names.len());
    Ok((ptx.into_bytes(), log))
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkCreate_v2(
    count: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
    out: *mut Handle,
) -> u32 {
    with_context("cuLinkCreate", |d, context| {
        if out.is_null() || (count > 0 && (options.is_null() || values.is_null())) {
            return Err(code::INVALID_VALUE);
        }
        let mut link = Link { context, inputs: Vec::new(), info: (0, 0), errors: (0, 0), verbose: false, image: None };
        let (mut info_sized, mut errors_sized) = (false, false);
        for i in 0..count as usize {
            let value = *values.add(i) as usize;
            match *options.add(i) {
                INFO_LOG_BUFFER => link.info.0 = value,
                INFO_LOG_BUFFER_SIZE_BYTES => (link.info.1, info_sized) = (value as c_uint as usize, true),
                ERROR_LOG_BUFFER => link.errors.0 = value,
                ERROR_LOG_BUFFER_SIZE_BYTES => (link.errors.1, errors_sized) = (value as c_uint as usize, true),
                LOG_VERBOSE => link.verbose = value != 0,
                _ => {}
            }
        }
        if (link.info.0 != 0 && !info_sized) || (link.errors.0 != 0 && !errors_sized) {
            d.violation("cuLinkCreate: a log buffer without its size".into());
            return Err(code::INVALID_VALUE);
        }
        let state = d.handle();
        LINKS.lock().insert(state, link);
        *out = state as Handle;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkAddData_v2(
    state: Handle,
    kind: c_uint,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    count: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> u32 {
    let mut refused = None;
    let result = with_link("cuLinkAddData", state, |link| {
        if data.is_null() || size == 0 || kind >= INPUT_TYPES {
            return Err(code::INVALID_VALUE);
        }
        let mut bytes = std::slice::from_raw_parts(data as *const u8, size).to_vec();
        if kind == INPUT_PTX {
            let Some(end) = bytes.iter().position(|&b| b == 0) else {
                refused = Some("cuLinkAddData: PTX not NUL-terminated within its size".to_string());
                return Err(code::INVALID_VALUE);
            };
            bytes.truncate(end);
        }
        let name = if name.is_null() { String::new() } else { CStr::from_ptr(name).to_string_lossy().into_owned() };
        // An input's own options: verbosity is the one the stand-in reads.
        for i in 0..count as usize {
            if options.is_null() || values.is_null() {
                return Err(code::INVALID_VALUE);
            }
            if *options.add(i) == LOG_VERBOSE && !(*values.add(i)).is_null() {
                link.verbose = true;
            }
        }
        link.inputs.push((name, kind, bytes));
        Ok(())
    });
    if let Some(why) = refused {
        crate::driver().violation(why);
    }
    result
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkComplete(state: Handle, image: *mut *mut c_void, size: *mut usize) -> u32 {
    with_link("cuLinkComplete", state, |link| {
        if image.is_null() {
            return Err(code::INVALID_VALUE);
        }
        match link_inputs(&link.inputs) {
            Ok((linked, log)) => {
                write_log(link.info, if link.verbose { &log } else { "" });
                let linked = link.image.insert(linked);
                *image = linked.as_mut_ptr() as *mut c_void;
                if !size.is_null() {
                    *size = linked.len();
                }
                Ok(())
            }
            Err(log) => {
                write_log(link.errors, &log);
                Err(code::INVALID_IMAGE)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkDestroy(state: Handle) -> u32 {
    match LINKS.lock().remove(&id(state)) {
        Some(_) => code::SUCCESS,
        None => code::INVALID_HANDLE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMES: &str = ".version 8.0\n.visible .func  (.param .b32 r) _Z5timesff(\n.param .b32 a\n)\n{ ret; }\n";
    const CALLER: &str = ".version 8.0\n.extern .func  (.param .b32 r) _Z5timesff\n(\n.param .b32 a\n)\n;\n.visible .entry _Z5scalePffi(\n.param .u64 x\n)\n{ ret; }\n";

    fn ptx(name: &str, text: &str) -> (String, c_uint, Vec<u8>) {
        (name.into(), INPUT_PTX, text.as_bytes().to_vec())
    }

    #[test]
    fn functions_defined_and_external_are_told_apart() {
        let (defined, external) = functions(CALLER);
        assert!(defined.is_empty(), "{defined:?}");
        assert_eq!(external.into_iter().collect::<Vec<_>>(), ["_Z5timesff"]);
        assert_eq!(functions(TIMES).0.into_iter().collect::<Vec<_>>(), ["_Z5timesff"]);
    }

    #[test]
    fn a_link_declares_every_kernel_and_refuses_an_undefined_function() {
        let (image, _) = link_inputs(&[ptx("caller", CALLER), ptx("times", TIMES)]).unwrap();
        assert_eq!(kernels::names(&image[..image.len() - 1]), Some(vec!["_Z5scalePffi".to_string()]));
        let log = link_inputs(&[ptx("caller", CALLER)]).unwrap_err();
        assert!(log.contains("Undefined reference to '_Z5timesff' in 'caller'"), "{log}");
    }
}
