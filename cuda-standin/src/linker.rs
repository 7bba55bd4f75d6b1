//! Linking (`cuLinkCreate_v2`, `cuLinkAddData_v2`, `cuLinkComplete`, `cuLinkDestroy`), as the
//! backend links for the CUDA shim's `cuLinkComplete`. The stand-in's linker reads each input's
//! kernels (PTX, cubins and fat binaries, as it reads a module's image), resolves PTX's external
//! functions (`.extern .func`) against those the inputs define, and makes a PTX image declaring
//! every kernel, which its `cuModuleLoadData` loads and its registered kernels run. It checks
//! the contract on the way: PTX NUL-terminated within its size, no input whose headers (an ELF
//! image's, a fat binary's, a library member's) claim bytes past its size, a link used in the
//! context it was made in, each log buffer given with its size. A host object's device code is
//! its embedded fat binary, a library's that of its ELF members. It writes its info log when verbosity
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

/// `CUjitInputType`s: PTX, a host object, a library of them, and one past NVVM.
const INPUT_PTX: c_uint = 1;
const INPUT_OBJECT: c_uint = 3;
const INPUT_LIBRARY: c_uint = 4;
const INPUT_TYPES: c_uint = 6;

/// Bytes of an `ar` archive member's header, and the archive's first bytes.
const MEMBER_HEADER: usize = 60;
const ARCHIVE_MAGIC: &[u8] = b"!<arch>\n";
const ELF_MAGIC: &[u8] = b"\x7fELF";

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

/// Functions the driver gives every module (`printf`, device-side `malloc`, aligned or not, and
/// `free`, a failed `assert`): PTX declares them external.
const SYSTEM_FUNCTIONS: [&str; 5] = ["vprintf", "malloc", "__nv_aligned_device_malloc", "free", "__assertfail"];

/// How many times `name` appears in `ptx` as a whole word (its declaration, and its calls).
fn mentions(ptx: &str, name: &str) -> usize {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
    let found = ptx.match_indices(name);
    found
        .filter(|(at, _)| !word(ptx[..*at].chars().next_back()) && !word(ptx[at + name.len()..].chars().next()))
        .count()
}

/// Checks that module `image`, if PTX, calls no external function it does not define (one it
/// declares and never names again is no call): a module is compiled whole, not linked, and the
/// driver's JIT refuses one with
/// `CUDA_ERROR_INVALID_PTX`, naming it in the error log that `options` ask for.
///
/// # Safety
/// `options` and `values` hold `count` entries each, or are null.
pub unsafe fn resolved_alone(
    image: &[u8],
    (count, options, values): (c_uint, *mut c_int, *mut *mut c_void),
) -> Result<(), u32> {
    let Some(ptx) = std::str::from_utf8(image).ok().filter(|_| !image.starts_with(ELF_MAGIC)) else { return Ok(()) };
    let (defined, external) = functions(ptx);
    let system = |f: &String| SYSTEM_FUNCTIONS.contains(&f.as_str());
    let called = |f: &String| mentions(ptx, f) > 1;
    let Some(missing) = external.iter().find(|f| !defined.contains(*f) && !system(f) && called(f)) else {
        return Ok(());
    };
    let mut log = (0, 0);
    for i in (0..count as usize).filter(|_| !options.is_null() && !values.is_null()) {
        match *options.add(i) {
            ERROR_LOG_BUFFER => log.0 = *values.add(i) as usize,
            ERROR_LOG_BUFFER_SIZE_BYTES => log.1 = *values.add(i) as usize as c_uint as usize,
            _ => {}
        }
    }
    write_log(log, &format!("ptxas fatal   : Unresolved extern function '{missing}'"));
    Err(code::INVALID_PTX)
}

/// The members (name field, bytes) of `ar` archive `bytes`, the symbol table's and long names'
/// with them; `Err` says which member's header or bytes run past the archive's end.
fn archive_members(bytes: &[u8]) -> Result<Vec<(String, &[u8])>, String> {
    let mut members = Vec::new();
    let mut at = ARCHIVE_MAGIC.len();
    while at < bytes.len() {
        let header = bytes.get(at..at + MEMBER_HEADER).ok_or("a member header past the library's end")?;
        let name = String::from_utf8_lossy(&header[..16]).trim_end().to_string();
        let size = std::str::from_utf8(&header[48..58]).ok().and_then(|s| s.trim_end().parse::<usize>().ok());
        let data = size.and_then(|size| bytes.get(at + MEMBER_HEADER..(at + MEMBER_HEADER).checked_add(size)?));
        let data = data.ok_or_else(|| format!("library member {name:?}'s bytes past the library's end"))?;
        members.push((name, data));
        at += MEMBER_HEADER + data.len() + data.len() % 2;
    }
    Ok(members)
}

/// Where input `bytes` of type `kind` would have the driver read past them: an ELF image or a
/// fat binary whose headers claim more, a library member past the library's end.
fn past_the_end(kind: c_uint, bytes: &[u8]) -> Option<String> {
    let image_past = |bytes: &[u8]| {
        if bytes.starts_with(ELF_MAGIC) {
            crate::elf::len(bytes).is_none_or(|len| len > bytes.len())
        } else {
            kernels::fatbin_len(bytes).is_some_and(|len| len > bytes.len())
        }
    };
    match kind {
        INPUT_LIBRARY if bytes.starts_with(ARCHIVE_MAGIC) => match archive_members(bytes) {
            Err(why) => Some(why),
            Ok(members) => {
                members.into_iter().find(|(_, m)| image_past(m)).map(|(name, _)| format!("library member {name:?} cut"))
            }
        },
        INPUT_PTX | INPUT_LIBRARY => None,
        _ => image_past(bytes).then(|| "an image whose headers claim more bytes than its size".to_string()),
    }
}

/// The device code input `bytes` of type `kind` holds: itself, or a host object's embedded fat
/// binary, or those of a library's ELF members; `None` if it is not the kind it is declared.
fn device_code(kind: c_uint, bytes: &[u8]) -> Option<Vec<&[u8]>> {
    match kind {
        INPUT_OBJECT if bytes.starts_with(ELF_MAGIC) => Some(vec![crate::elf::embedded_device_code(bytes)?]),
        INPUT_LIBRARY if bytes.starts_with(ARCHIVE_MAGIC) => {
            let members = archive_members(bytes).ok()?.into_iter().filter(|(_, m)| m.starts_with(ELF_MAGIC));
            members.map(|(_, m)| crate::elf::embedded_device_code(m)).collect()
        }
        INPUT_OBJECT | INPUT_LIBRARY => None,
        _ => Some(vec![bytes]),
    }
}

/// Links `inputs`: a PTX image declaring every kernel, or the error log. An object's or a
/// library's image for this device that is compressed is a legal one the stand-in cannot read:
/// it adds no kernels, and the info log counts it.
fn link_inputs(inputs: &[(String, c_uint, Vec<u8>)]) -> Result<(Vec<u8>, String), String> {
    let (mut names, mut defined, mut needed, mut unread) = (Vec::new(), BTreeSet::new(), Vec::new(), 0);
    let (arch, minor) = state::COMPUTE_CAPABILITY;
    let images = inputs.iter().map(|(name, kind, bytes)| {
        let code = device_code(*kind, bytes).ok_or_else(|| format!("input '{name}' is not of its type ({kind})"))?;
        Ok(code.into_iter().filter(|c| !c.is_empty()).map(move |c| (name, kind, c, *kind >= INPUT_OBJECT)))
    });
    for (name, kind, bytes, embedded) in images.collect::<Result<Vec<_>, String>>()?.into_iter().flatten() {
        let image = if bytes.starts_with(&kernels::FATBIN_MAGIC.to_le_bytes()) {
            match kernels::fatbin_image(bytes, arch * 10 + minor) {
                Ok(image) => image,
                Err(code::NOT_SUPPORTED) if embedded => {
                    unread += 1;
                    continue;
                }
                Err(_) => return Err(format!("cannot read fat binary '{name}'")),
            }
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
    let mut ptx = format!(".version 8.0\n.target sm_{arch}{minor}\n.address_size 64\n// linked by cuda-standin\n");
    for kernel in &names {
        ptx.push_str(&format!(".visible .entry {kernel}()\n{{\n\tret;\n}}\n"));
    }
    ptx.push('\0');
    let mut log =
        format!("cuda-standin: linked {} inputs, {} kernels, for sm_{arch}{minor}", inputs.len(), names.len());
    if unread > 0 {
        log.push_str(&format!("; {unread} compressed images of objects or libraries not read"));
    }
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
        if let Some(why) = past_the_end(kind, &bytes) {
            refused = Some(format!("cuLinkAddData: {why}"));
            return Err(code::INVALID_IMAGE);
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
    const CALLER: &str = ".version 8.0\n.extern .func  (.param .b32 r) _Z5timesff\n(\n.param .b32 a\n)\n;\n.visible .entry _Z5scalePffi(\n.param .u64 x\n)\n{\ncall.uni (r), _Z5timesff, (a);\nret;\n}\n";

    fn ptx(name: &str, text: &str) -> (String, c_uint, Vec<u8>) {
        (name.into(), INPUT_PTX, text.as_bytes().to_vec())
    }

    /// Three kernels for sm_90 (a cubin, and compressed PTX), and the same kernels as
    /// compressed PTX alone.
    const SM_90: &[u8] = include_bytes!("../../tests/fixtures/shim_kernels.sm_90.fatbin");
    const COMPRESSED: &[u8] = include_bytes!("../../tests/fixtures/shim_kernels.compute_90.fatbin");

    /// A host object as `nvcc -rdc=true -c` makes one: `fatbin` in its `__nv_relfatbin` section.
    fn object(fatbin: &[u8]) -> Vec<u8> {
        let names = b"\0.shstrtab\0__nv_relfatbin\0\0\0\0\0\0";
        let (names_at, code_at) = (64u64, 64 + names.len() as u64);
        let table_at = (code_at + fatbin.len() as u64).next_multiple_of(8);
        let mut b = ELF_MAGIC.to_vec();
        b.extend([2, 1, 1]);
        b.resize(64, 0);
        b[0x28..0x30].copy_from_slice(&table_at.to_le_bytes());
        b[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        b[0x3C..0x3E].copy_from_slice(&3u16.to_le_bytes());
        b[0x3E..0x40].copy_from_slice(&1u16.to_le_bytes());
        b.extend(names);
        b.extend(fatbin);
        b.resize(table_at as usize + 64, 0);
        for (name, kind, at, size) in [(1u32, 3u32, names_at, names.len()), (11, 1, code_at, fatbin.len())] {
            let mut section = [0u8; 64];
            section[..4].copy_from_slice(&name.to_le_bytes());
            section[4..8].copy_from_slice(&kind.to_le_bytes());
            section[0x18..0x20].copy_from_slice(&at.to_le_bytes());
            section[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
            b.extend(section);
        }
        b
    }

    /// An `ar` archive of `members`.
    fn archive(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut a = ARCHIVE_MAGIC.to_vec();
        for (name, data) in members {
            a.extend(format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", 0, 0, 0, 644, data.len()).as_bytes());
            a.extend(*data);
            if data.len() % 2 == 1 {
                a.push(b'\n');
            }
        }
        a
    }

    #[test]
    fn objects_and_libraries_give_the_device_code_they_embed() {
        let library = archive(&[("/", b"\0\0\0\0odd"), ("k.o/", &object(SM_90)), ("c.o/", &object(COMPRESSED))]);
        let (image, log) = link_inputs(&[("lib.a".into(), INPUT_LIBRARY, library)]).unwrap();
        let mut names = kernels::names(&image[..image.len() - 1]).unwrap();
        names.sort();
        let mut shim_kernels = [kernels::IOTA_KERNEL, kernels::SCALE_KERNEL, kernels::VADD_KERNEL];
        shim_kernels.sort();
        assert_eq!(names, shim_kernels, "the cubin's kernels");
        assert!(log.ends_with("; 1 compressed images of objects or libraries not read"), "{log}");
        let (image, _) = link_inputs(&[("k.o".into(), INPUT_OBJECT, object(SM_90))]).unwrap();
        assert_eq!(kernels::names(&image[..image.len() - 1]).unwrap().len(), 3);
        let mismatched = link_inputs(&[("k.o".into(), INPUT_LIBRARY, object(SM_90))]).unwrap_err();
        assert_eq!(mismatched, "input 'k.o' is not of its type (4)");
        assert!(link_inputs(&[("t".into(), INPUT_OBJECT, TIMES.as_bytes().to_vec())]).is_err());
    }

    #[test]
    fn a_module_calling_a_function_it_does_not_define_is_refused_naming_it() {
        let mut log = [0u8; 128];
        let mut options = [ERROR_LOG_BUFFER, ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut values = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
        let refused = unsafe { resolved_alone(CALLER.as_bytes(), (2, options.as_mut_ptr(), values.as_mut_ptr())) };
        assert_eq!(refused, Err(code::INVALID_PTX));
        let said = String::from_utf8_lossy(&log);
        assert!(said.starts_with("ptxas fatal   : Unresolved extern function '_Z5timesff'\0"), "{said}");
        let none = (0, std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(unsafe { resolved_alone(format!("{CALLER}{TIMES}").as_bytes(), none) }, Ok(()));
        let printing = ".version 8.0\n.extern .func  (.param .b32 r) vprintf\n(\n.param .b64 f\n)\n;\ncall vprintf;\n";
        assert_eq!(unsafe { resolved_alone(printing.as_bytes(), none) }, Ok(()), "the driver's own functions");
        let declared = CALLER.replace("call.uni (r), _Z5timesff, (a);\n", "");
        assert_eq!(mentions(&declared, "_Z5timesff"), 1);
        assert_eq!(unsafe { resolved_alone(declared.as_bytes(), none) }, Ok(()), "declared, never called");
    }

    #[test]
    fn an_input_whose_headers_claim_bytes_past_it_is_seen() {
        let k = object(SM_90);
        assert_eq!(past_the_end(INPUT_OBJECT, &k), None);
        assert!(past_the_end(INPUT_OBJECT, &k[..k.len() - 1]).is_some(), "its section table cut");
        assert!(past_the_end(0, &SM_90[..SM_90.len() - 8]).is_some(), "a fat binary cut");
        let library = archive(&[("k.o/", &k)]);
        assert_eq!(past_the_end(INPUT_LIBRARY, &library), None);
        let cut = past_the_end(INPUT_LIBRARY, &library[..library.len() - 1]).unwrap();
        assert_eq!(cut, "library member \"k.o/\"'s bytes past the library's end");
        let inner = archive(&[("k.o/", &k[..k.len() - 1])]);
        assert_eq!(past_the_end(INPUT_LIBRARY, &inner).unwrap(), "library member \"k.o/\" cut");
        assert_eq!(past_the_end(INPUT_PTX, b".version 8.0"), None);
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
