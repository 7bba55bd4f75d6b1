//! Linking device code (`cuLinkCreate`, `cuLinkAddData`, `cuLinkAddFile`, `cuLinkComplete`,
//! `cuLinkDestroy`), what Numba does with every kernel and CuPy with `-rdc=true` modules. The
//! inputs are kept here and linked at `cuLinkComplete` by the driver of the device current at
//! `cuLinkCreate` (backend protocol 21), for that GPU's architecture. An input that is not the
//! kind it is declared as, or whose headers run past its bytes, is refused at `cuLinkAddData`
//! (the checks the backend runs again); the linker's own errors surface at `cuLinkComplete`.
//! The image is the link state's until `cuLinkDestroy`, and loads as any (`cuModuleLoadData`).
//! The log buffers, their sizes and the wall time the program asked for at `cuLinkCreate` are
//! written back at `cuLinkComplete` (and the error log at a refused `cuLinkAddData`), into the
//! option values it must keep for the state's life (as `cuda.h` says).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use ac_proto::backend::device_code;
use ac_proto::backend::jit_link::is_forwarded;
use ac_proto::backend::{JitOption, LinkInput, LinkInputKind};

use super::jit_log::Outputs;
use crate::context::current_device;
use crate::error::{code, served, CuResult, Error};
use crate::guard;
use crate::state::{self, put, Registry};

/// `CUjit_option`s the shim reads itself.
mod option {
    pub use super::super::jit_log::option::*;
    pub const TARGET_FROM_CUCONTEXT: u32 = 8;
    pub const TARGET: u32 = 9;
    pub const FALLBACK_STRATEGY: u32 = 10;
    /// One past the last option `cuda.h` (13.x) defines.
    pub const END: u32 = 36;
}

/// A pending link (`CUlinkState`).
#[derive(Debug)]
struct Link {
    device: usize,
    options: Vec<JitOption>,
    outputs: Outputs,
    pending: Mutex<Pending>,
}

/// What a link holds until it is destroyed.
#[derive(Debug, Default)]
struct Pending {
    inputs: Vec<(LinkInput, Vec<u8>)>,
    /// The image, once linked: the program reads it until `cuLinkDestroy`.
    image: Option<Vec<u8>>,
}

fn links() -> &'static Registry<Link> {
    static LINKS: OnceLock<Registry<Link>> = OnceLock::new();
    LINKS.get_or_init(Registry::default)
}

/// The options of `cuLinkCreate` (`at_create`) or `cuLinkAddData`: those the device's linker
/// takes, and where the outputs go. `cuLinkAddData` takes compiler options only.
///
/// # Safety
/// `options` and `values` hold `count` entries each, or `count` is 0.
unsafe fn read_options(
    count: c_uint,
    options: *const c_int,
    values: *mut *mut c_void,
    at_create: bool,
) -> CuResult<(Vec<JitOption>, Outputs)> {
    let (mut forwarded, mut outputs) = (Vec::new(), Outputs::default());
    if count == 0 {
        return Ok((forwarded, outputs));
    }
    if options.is_null() || values.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    for i in 0..count as usize {
        let (option, slot) = (*options.add(i) as u32, values.add(i));
        let value = *slot as usize;
        match option {
            option::WALL_TIME | option::INFO_LOG_BUFFER | option::ERROR_LOG_BUFFER | option::TARGET_FROM_CUCONTEXT
                if !at_create =>
            {
                return Err(Error::said(code::INVALID_VALUE, format!("JIT option {option} is not one for an input")));
            }
            option::TARGET if !at_create => {
                return Err(Error::said(code::INVALID_VALUE, "CU_JIT_TARGET is not one for an input"));
            }
            o if outputs.take(o, slot) => {}
            option::TARGET_FROM_CUCONTEXT => {}
            option::FALLBACK_STRATEGY => {
                return Err(Error::said(
                    code::INVALID_VALUE,
                    "CU_JIT_FALLBACK_STRATEGY is not one for cuLink* (cuda.h)",
                ));
            }
            o if is_forwarded(o) => forwarded.push(JitOption { option: o, value: value as u64 }),
            o if o < option::END => {
                let why = format!(
                    "JIT option {o} (global symbols, referenced names) is not supported on remote accelerators"
                );
                return Err(Error::said(code::NOT_SUPPORTED, why));
            }
            _ => return Err(Error::Code(code::INVALID_VALUE)),
        }
    }
    Ok((forwarded, outputs))
}

/// Starts a link on the current device.
unsafe fn create(count: c_uint, options: *mut c_int, values: *mut *mut c_void) -> CuResult<usize> {
    let device = current_device()?;
    let (options, outputs) = read_options(count, options, values, true)?;
    Ok(links().insert(Link { device, options, outputs, pending: Mutex::default() }))
}

/// Adds input `bytes` of CUDA's input type `kind` to link `state`, refused (its reason in the
/// error log) where its bytes are not that kind's or run past themselves, as the driver refuses
/// them here.
unsafe fn add(
    state: usize,
    kind: c_uint,
    bytes: Vec<u8>,
    name: String,
    (count, options, values): (c_uint, *mut c_int, *mut *mut c_void),
) -> CuResult<()> {
    let link = links().get(state)?;
    let kind = LinkInputKind::from_raw(kind).ok_or(Error::Code(code::INVALID_VALUE))?;
    let (options, _) = read_options(count, options, values, false)?;
    if let Err(why) = device_code::check_input(kind, &bytes) {
        let why = format!("{name}: {why}");
        link.outputs.errors.write(&why);
        let refused = if kind == LinkInputKind::Ptx { code::INVALID_PTX } else { code::INVALID_IMAGE };
        return Err(Error::said(refused, why));
    }
    let input = LinkInput { kind, name, len: bytes.len() as u64, options };
    link.pending.lock().unwrap_or_else(|p| p.into_inner()).inputs.push((input, bytes));
    Ok(())
}

/// Links `state`'s inputs on its device (once: a second call answers the same image), writing
/// the logs and wall time the program asked for.
unsafe fn complete(state: usize, image_out: *mut *mut c_void, size_out: *mut usize) -> CuResult<()> {
    if image_out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let link = links().get(state)?;
    let mut pending = link.pending.lock().unwrap_or_else(|p| p.into_inner());
    if pending.image.is_none() {
        if pending.inputs.is_empty() {
            return Err(Error::said(code::INVALID_VALUE, "a link with no inputs"));
        }
        let started = Instant::now();
        let shim = state::shim()?;
        let inputs: Vec<(LinkInput, &[u8])> = pending.inputs.iter().map(|(i, b)| (i.clone(), b.as_slice())).collect();
        let linked = shim.block_on(shim.devices[link.device].acc.link(&inputs, &link.options)).map_err(served);
        match &linked {
            Ok(linked) => link.outputs.write(started, Ok(&linked.info_log)),
            Err(e) => link.outputs.write(started, Err(&e.to_string())),
        }
        let linked = linked?;
        pending.image = Some(linked.image.to_vec());
    }
    let image = pending.image.as_ref().expect("linked above");
    put(image_out, image.as_ptr() as *mut c_void)?;
    if !size_out.is_null() {
        put(size_out, image.len())?;
    }
    Ok(())
}

/// The bytes of PTX, or of another input whose size is given, at `data`.
unsafe fn input_bytes(data: *const c_void, size: usize) -> CuResult<Vec<u8>> {
    if data.is_null() || size == 0 {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    Ok(std::slice::from_raw_parts(data as *const u8, size).to_vec())
}

/// The name a program gave an input, or one of the link's own.
unsafe fn input_name(name: *const c_char, state: usize) -> CuResult<String> {
    if !name.is_null() {
        return Ok(CStr::from_ptr(name).to_string_lossy().into_owned());
    }
    let link = links().get(state)?;
    let n = link.pending.lock().unwrap_or_else(|p| p.into_inner()).inputs.len();
    Ok(format!("input {n}"))
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkCreate_v2(
    count: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
    out: *mut usize,
) -> u32 {
    guard("cuLinkCreate", || {
        if out.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        put(out, create(count, options, values)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkAddData_v2(
    state: usize,
    kind: c_uint,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    count: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> u32 {
    guard("cuLinkAddData", || {
        add(state, kind, input_bytes(data, size)?, input_name(name, state)?, (count, options, values))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkAddFile_v2(
    state: usize,
    kind: c_uint,
    path: *const c_char,
    count: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> u32 {
    guard("cuLinkAddFile", || {
        if path.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let name = CStr::from_ptr(path).to_string_lossy().into_owned();
        let bytes = std::fs::read(&name).map_err(|e| Error::said(code::FILE_NOT_FOUND, format!("{name}: {e}")))?;
        add(state, kind, bytes, name, (count, options, values))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLinkComplete(state: usize, image_out: *mut *mut c_void, size_out: *mut usize) -> u32 {
    guard("cuLinkComplete", || complete(state, image_out, size_out))
}

#[no_mangle]
pub extern "C" fn cuLinkDestroy(state: usize) -> u32 {
    guard("cuLinkDestroy", || links().remove(state).map(drop))
}

// CUDA 5.5's names, of the same signatures (`cuda.h` maps them to the `_v2` forms since 6.5).
crate::per_thread_aliases! {
    cuLinkCreate => cuLinkCreate_v2,
    cuLinkAddData => cuLinkAddData_v2,
    cuLinkAddFile => cuLinkAddFile_v2,
}
