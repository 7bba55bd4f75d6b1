//! Module images and kernels. A library (`cuLibraryLoadData`, how the CUDA runtime registers
//! a program's fat binaries) belongs to no context: it is uploaded to a device the first time
//! one of its kernels runs there. A module (`cuModuleLoadData`) is loaded at once on the
//! current device, so that a bad image fails the call that loads it. A kernel's parameter
//! sizes come with its lookup (backend protocol 7) and are kept per device. A variable
//! (`__device__`, `__constant__`: `cuModuleGetGlobal`, `cuLibraryGetGlobal`) is the backend's
//! buffer over the module's memory (protocol 9), entered into the program's memory by its
//! address, so that copies and kernels reach it as any allocation; it goes with its image.
//! A module's or library's kernels are listed by [`listing`]; device code is linked by [`link`].
//! The JIT's logs and wall time a load asks for (`cuModuleLoadDataEx`, `cuLibraryLoadData`) are
//! written when it ends (`jit_log`): a failed load's error log holds its reason and the remote
//! driver's log; the compiler options are not sent (the remote driver's defaults).

mod jit_log;
pub mod link;
pub mod listing;

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

use ac_frontend::{Function, Module};
use ac_proto::backend::ModuleSource;

use self::jit_log::Outputs;
use crate::attributes::{self, Attributes};
use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::image::{self, Kind};
use crate::state::{self, put, Registry};

/// An image the program loaded: a library, or a module bound to one device.
#[derive(Debug)]
pub struct Image {
    kind: Kind,
    bytes: Vec<u8>,
    /// The device a module was loaded on; `None` for a library.
    bound: Option<usize>,
    /// Where it is loaded, by device.
    loaded: Mutex<HashMap<usize, Module>>,
    /// Kernel handles already given, by name.
    kernels: Mutex<HashMap<String, usize>>,
    /// The device whose copy of its `__managed__` variables the host has, once one was asked.
    managed_on: OnceLock<usize>,
    /// Whether a launch on another device was warned of.
    warned: std::sync::atomic::AtomicBool,
    /// The names of its kernels, once the device's driver listed them.
    names: OnceLock<Vec<String>>,
}

/// A kernel the program holds (`CUfunction` and `CUkernel` alike).
#[derive(Debug)]
pub struct Kernel {
    /// Its name, NUL-terminated for `cuFuncGetName`.
    pub name: CString,
    image: Arc<Image>,
    resolved: Mutex<HashMap<usize, Arc<Resolved>>>,
}

/// A kernel looked up on one device.
#[derive(Debug)]
pub struct Resolved {
    /// The session's function.
    pub function: Function,
    /// Its parameters' sizes, when the device knows them.
    pub sizes: Option<Vec<u32>>,
    /// Its attributes, as the device says and the program set them.
    pub attributes: Attributes,
}

fn images() -> &'static Registry<Image> {
    static IMAGES: OnceLock<Registry<Image>> = OnceLock::new();
    IMAGES.get_or_init(Registry::default)
}

/// Kernels, by handle.
pub fn kernels() -> &'static Registry<Kernel> {
    static KERNELS: OnceLock<Registry<Kernel>> = OnceLock::new();
    KERNELS.get_or_init(Registry::default)
}

impl Image {
    /// The image loaded on `device` (uploaded the first time).
    fn on(&self, device: usize) -> CuResult<Module> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(module) = loaded.get(&device) {
            return Ok(module.clone());
        }
        let shim = state::shim()?;
        let source = match self.kind {
            Kind::Binary => ModuleSource::Cubin,
            Kind::Ptx => ModuleSource::Ptx,
        };
        let (module, _sent) = shim.block_on(shim.devices[device].acc.load_module_cached(source, &self.bytes))?;
        loaded.insert(device, module.clone());
        Ok(module)
    }
}

impl Kernel {
    /// The device a launch of this kernel runs on: its module's, or the current one.
    pub fn device(&self) -> CuResult<usize> {
        self.image.bound.map_or_else(current_device, Ok)
    }

    /// Whether the kernel was looked up on `device` (its image uploaded there, the function
    /// found): what lazy loading calls loaded.
    pub fn is_loaded_on(&self, device: usize) -> bool {
        self.resolved.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&device)
    }

    /// The kernel as looked up on `device` (looked up the first time).
    pub fn on(&self, device: usize) -> CuResult<Arc<Resolved>> {
        let mut resolved = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = resolved.get(&device) {
            return Ok(r.clone());
        }
        let module = self.image.on(device)?;
        let shim = state::shim()?;
        let name = self.name.to_str().map_err(|_| Error::Code(code::NOT_FOUND))?;
        let (function, sizes) = shim.block_on(module.function_layout(name))?;
        let r = Arc::new(Resolved { function, sizes, attributes: Attributes::default() });
        resolved.insert(device, r.clone());
        Ok(r)
    }
}

/// Loads the image at `ptr` as a library, or as a module on the current device.
unsafe fn load(ptr: *const c_void, module: bool) -> CuResult<usize> {
    let (kind, bytes) = image::read(ptr as *const u8)?;
    let bound = if module { Some(current_device()?) } else { None };
    let image = Image {
        kind,
        bytes,
        bound,
        loaded: Mutex::default(),
        kernels: Mutex::default(),
        managed_on: OnceLock::new(),
        warned: Default::default(),
        names: OnceLock::new(),
    };
    if let Some(device) = bound {
        image.on(device)?;
    }
    Ok(images().insert(image))
}

/// The handles of the kernels image `handle` holds, as lookups by their names give them (not
/// looked up yet: lazily loaded), listed by the driver of its module's device or, for a
/// library, the current one (once: an image's kernels are the same on every device).
pub(crate) fn listed_kernels(handle: usize) -> CuResult<Vec<usize>> {
    let image = images().get(handle)?;
    let names = match image.names.get() {
        Some(names) => names.clone(),
        None => {
            // A library belongs to no context: with none current, the first device lists it.
            let device = match image.bound.map_or_else(current_device, Ok) {
                Err(e) if e.code() == code::INVALID_CONTEXT => 0,
                other => other?,
            };
            let module = image.on(device)?;
            let names = state::shim()?.block_on(module.kernel_names()).map_err(crate::error::served)?;
            image.names.get_or_init(|| names).clone()
        }
    };
    let handle_of = |name: &String| {
        let name = CString::new(name.as_str()).map_err(|_| Error::Code(code::NOT_FOUND))?;
        // SAFETY: a NUL-terminated name.
        unsafe { kernel(handle, name.as_ptr(), false) }
    };
    names.iter().map(handle_of).collect()
}

/// A kernel handle for `name` of image `handle` (the same handle for the same name).
unsafe fn kernel(handle: usize, name: *const c_char, look_up_now: bool) -> CuResult<usize> {
    if name.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let image = images().get(handle)?;
    let name = CStr::from_ptr(name).to_owned();
    let key = name.to_string_lossy().into_owned();
    if let Some(&k) = image.kernels.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(k);
    }
    let record = Kernel { name, image: image.clone(), resolved: Mutex::default() };
    if look_up_now {
        record.on(record.device()?)?;
    }
    let k = kernels().insert(record);
    image.kernels.lock().unwrap_or_else(|p| p.into_inner()).insert(key, k);
    Ok(k)
}

/// The device address and size of variable `name` of image `handle` on `device` (looked up,
/// and entered into the program's memory, the first time).
unsafe fn variable(handle: usize, name: *const c_char, device: usize) -> CuResult<(u64, u64)> {
    if name.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let image = images().get(handle)?;
    let name = CStr::from_ptr(name).to_str().map_err(|_| Error::Code(code::NOT_FOUND))?;
    let shim = state::shim()?;
    let module = image.on(device)?;
    let global = shim.block_on(module.global(name))?;
    let (address, size) = (global.address, global.size);
    let buffer = Arc::new(global.buffer);
    let allocation = state::Allocation { device, size, buffer, variable_of: Some(handle), context: None };
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).entry((device, address)).or_insert(allocation);
    Ok((address, size))
}

/// `cuModuleGetGlobal`'s and `cuLibraryGetGlobal`'s answer: either pointer may be null.
unsafe fn put_variable(address: *mut u64, bytes: *mut usize, (at, size): (u64, u64)) -> CuResult<()> {
    if !address.is_null() {
        put(address, at)?;
    }
    if !bytes.is_null() {
        put(bytes, size as usize)?;
    }
    Ok(())
}

/// Unloads an image from every device it was uploaded to, its variables first.
fn unload(handle: usize) -> CuResult<()> {
    let image = images().remove(handle)?;
    let shim = state::shim()?;
    crate::managed::variables::forget(handle);
    shim.memory.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, a| a.variable_of != Some(handle));
    let modules: Vec<Module> = image.loaded.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, m)| m).collect();
    for k in image.kernels.lock().unwrap_or_else(|p| p.into_inner()).drain() {
        let _ = kernels().remove(k.1);
    }
    for module in modules {
        shim.block_on(module.unload())?;
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(out: *mut usize, image: *const c_void) -> u32 {
    guard("cuModuleLoadData", || put(out, load(image, true)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    out: *mut usize,
    image: *const c_void,
    count: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> u32 {
    guard("cuModuleLoadDataEx", || {
        let outputs = Outputs::of_load(count, options, values)?;
        put(out, outputs.around(|| load(image, true))?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadFatBinary(out: *mut usize, image: *const c_void) -> u32 {
    guard("cuModuleLoadFatBinary", || put(out, load(image, true)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoad(out: *mut usize, path: *const c_char) -> u32 {
    guard("cuModuleLoad", || {
        let bytes = read_image(path)?;
        put(out, load(bytes.as_ptr() as *const c_void, true)?)
    })
}

/// The image in the file at `path` (`CUDA_ERROR_FILE_NOT_FOUND` if it cannot be read), NUL
/// added (PTX is read as C text).
unsafe fn read_image(path: *const c_char) -> CuResult<Vec<u8>> {
    if path.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let path = CStr::from_ptr(path).to_string_lossy().into_owned();
    let mut bytes = std::fs::read(&path).map_err(|e| Error::said(code::FILE_NOT_FOUND, format!("{path}: {e}")))?;
    bytes.push(0);
    Ok(bytes)
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryLoadFromFile(
    out: *mut usize,
    path: *const c_char,
    jit_options: *mut c_int,
    jit_values: *mut *mut c_void,
    jit_count: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
    _count: c_uint,
) -> u32 {
    guard("cuLibraryLoadFromFile", || {
        let outputs = Outputs::of_load(jit_count, jit_options, jit_values)?;
        let library = outputs.around(|| {
            let bytes = read_image(path)?;
            load(bytes.as_ptr() as *const c_void, false)
        });
        put(out, library?)
    })
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(module: usize) -> u32 {
    guard("cuModuleUnload", || unload(module))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(out: *mut usize, module: usize, name: *const c_char) -> u32 {
    guard("cuModuleGetFunction", || put(out, kernel(module, name, true)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    address: *mut u64,
    bytes: *mut usize,
    module: usize,
    name: *const c_char,
) -> u32 {
    guard("cuModuleGetGlobal", || {
        let device = images().get(module)?.bound.map_or_else(current_device, Ok)?;
        put_variable(address, bytes, variable(module, name, device)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetGlobal(
    address: *mut u64,
    bytes: *mut usize,
    library: usize,
    name: *const c_char,
) -> u32 {
    // The variable on the current device: a library is loaded on each device it is used on.
    guard("cuLibraryGetGlobal", || put_variable(address, bytes, variable(library, name, current_device()?)?))
}

/// A `__managed__` variable: the runtime hands its address to host code, which reads and writes
/// it there ([`crate::managed::variables`]). Managed memory belongs to no context: with none
/// current, the variable is the first device's.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetManaged(
    address: *mut u64,
    bytes: *mut usize,
    library: usize,
    name: *const c_char,
) -> u32 {
    guard("cuLibraryGetManaged", || {
        // The runtime asks as it registers the program's modules, before any context is current:
        // the variable is then the first device's, the one the runtime makes current by default.
        let device = match current_device() {
            Err(e) if e.code() == code::INVALID_CONTEXT => 0,
            other => other?,
        };
        let (at, size) = variable(library, name, device)?;
        crate::managed::variables::enter(device, library, at, size)?;
        images().get(library)?.managed_on.get_or_init(|| device);
        put_variable(address, bytes, (at, size))
    })
}

/// Says once, on stderr, that `kernel` runs on `device` while the host has another device's copy
/// of its image's `__managed__` variables: the kernel uses `device`'s own copy, which the host
/// never sees (one remote GPU cannot reach another's memory).
pub(crate) fn warn_of_managed_variables(kernel: &Kernel, device: usize) {
    let image = &kernel.image;
    let Some(&host_side) = image.managed_on.get() else { return };
    if host_side != device && !image.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "ac-cuda: kernel `{}` runs on device {device}, but the host has device {host_side}'s copy of its \
             module's __managed__ variables: it uses device {device}'s own copy",
            kernel.name.to_string_lossy()
        );
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetLoadingMode(mode: *mut c_int) -> u32 {
    // CU_MODULE_LAZY_LOADING: libraries are uploaded when first used.
    guard("cuModuleGetLoadingMode", || put(mode, 2))
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryLoadData(
    out: *mut usize,
    code: *const c_void,
    jit_options: *mut c_int,
    jit_values: *mut *mut c_void,
    jit_count: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
    _count: c_uint,
) -> u32 {
    guard("cuLibraryLoadData", || {
        let outputs = Outputs::of_load(jit_count, jit_options, jit_values)?;
        put(out, outputs.around(|| load(code, false))?)
    })
}

#[no_mangle]
pub extern "C" fn cuLibraryUnload(library: usize) -> u32 {
    guard("cuLibraryUnload", || unload(library))
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetKernel(out: *mut usize, library: usize, name: *const c_char) -> u32 {
    guard("cuLibraryGetKernel", || put(out, kernel(library, name, false)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetModule(out: *mut usize, library: usize) -> u32 {
    // A library and its module share a handle: module calls on it act on the library.
    guard("cuLibraryGetModule", || {
        images().get(library)?;
        put(out, library)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetFunction(out: *mut usize, kernel: usize) -> u32 {
    guard("cuKernelGetFunction", || {
        kernels().get(kernel)?;
        put(out, kernel)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetName(out: *mut *const c_char, kernel: usize) -> u32 {
    guard("cuKernelGetName", || put(out, kernels().get(kernel)?.name.as_ptr()))
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetName(out: *mut *const c_char, function: usize) -> u32 {
    guard("cuFuncGetName", || put(out, kernels().get(function)?.name.as_ptr()))
}

/// Kernel `handle`'s parameter sizes, as its device knows them.
fn sizes_of(handle: usize) -> CuResult<Vec<u32>> {
    let k = kernels().get(handle)?;
    let known = k.on(k.device()?)?.sizes.clone();
    known.ok_or_else(|| Error::said(code::NOT_SUPPORTED, "the device does not know the kernel's parameters"))
}

/// Parameter `index` of kernel `handle`: its offset and size, put in `offset` and `size`.
unsafe fn param_info(handle: usize, index: usize, offset: *mut usize, size: *mut usize) -> CuResult<()> {
    let layout = layout(&sizes_of(handle)?);
    let &(at, width) = layout.get(index).ok_or(Error::Code(code::INVALID_VALUE))?;
    put(offset, at)?;
    put(size, width)
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetParamInfo(
    function: usize,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> u32 {
    guard("cuFuncGetParamInfo", || param_info(function, index, offset, size))
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetParamInfo(
    kernel: usize,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> u32 {
    guard("cuKernelGetParamInfo", || param_info(kernel, index, offset, size))
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetParamCount(function: usize, count: *mut usize) -> u32 {
    guard("cuFuncGetParamCount", || put(count, sizes_of(function)?.len()))
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetParamCount(kernel: usize, count: *mut usize) -> u32 {
    guard("cuKernelGetParamCount", || put(count, sizes_of(kernel)?.len()))
}

/// The handle of the image (a module, or a library: one handle for both) kernel `handle` is of.
fn image_of(handle: usize) -> CuResult<usize> {
    Ok(Registry::handle_of(&kernels().get(handle)?.image))
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetModule(module: *mut usize, function: usize) -> u32 {
    guard("cuFuncGetModule", || put(module, image_of(function)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetLibrary(library: *mut usize, kernel: usize) -> u32 {
    guard("cuKernelGetLibrary", || put(library, image_of(kernel)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncIsLoaded(state: *mut c_int, function: usize) -> u32 {
    guard("cuFuncIsLoaded", || {
        let k = kernels().get(function)?;
        // `CU_FUNCTION_LOADING_STATE_LOADED` (1) once looked up on its device, else `UNLOADED`.
        put(state, c_int::from(k.is_loaded_on(k.device()?)))
    })
}

#[no_mangle]
pub extern "C" fn cuFuncLoad(function: usize) -> u32 {
    guard("cuFuncLoad", || {
        let k = kernels().get(function)?;
        k.on(k.device()?).map(drop)
    })
}

/// Kernel `handle`'s attribute on `device`.
fn attribute_of(handle: usize, attribute: c_int, device: usize) -> CuResult<c_int> {
    let resolved = kernels().get(handle)?.on(device)?;
    match resolved.attributes.get(&resolved.function, attribute)? {
        Some(value) => Ok(value),
        None => attributes::architecture_attribute(device, attribute),
    }
}

/// Sets kernel `handle`'s attribute on `device`.
fn set_attribute(handle: usize, attribute: c_int, value: c_int, device: usize) -> CuResult<()> {
    let resolved = kernels().get(handle)?.on(device)?;
    resolved.attributes.set(&resolved.function, attribute, value)
}

/// A device ordinal the program gave, checked.
fn ordinal(device: c_int) -> CuResult<usize> {
    Ok(state::shim()?.device(device)?.context.device)
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(value: *mut c_int, attribute: c_int, function: usize) -> u32 {
    guard("cuFuncGetAttribute", || put(value, attribute_of(function, attribute, kernels().get(function)?.device()?)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    kernel: usize,
    device: c_int,
) -> u32 {
    guard("cuKernelGetAttribute", || put(value, attribute_of(kernel, attribute, ordinal(device)?)?))
}

#[no_mangle]
pub extern "C" fn cuFuncSetAttribute(function: usize, attribute: c_int, value: c_int) -> u32 {
    guard("cuFuncSetAttribute", || set_attribute(function, attribute, value, kernels().get(function)?.device()?))
}

#[no_mangle]
pub extern "C" fn cuKernelSetAttribute(attribute: c_int, value: c_int, kernel: usize, device: c_int) -> u32 {
    guard("cuKernelSetAttribute", || set_attribute(kernel, attribute, value, ordinal(device)?))
}

#[no_mangle]
pub extern "C" fn cuFuncSetCacheConfig(function: usize, _config: c_int) -> u32 {
    guard("cuFuncSetCacheConfig", || kernels().get(function).map(drop))
}

#[no_mangle]
pub extern "C" fn cuFuncSetSharedMemConfig(function: usize, config: c_int) -> u32 {
    guard("cuFuncSetSharedMemConfig", || {
        kernels().get(function)?;
        crate::context::settings::check_bank_size(config)
    })
}

#[no_mangle]
pub extern "C" fn cuKernelSetCacheConfig(kernel: usize, _config: c_int, _device: c_int) -> u32 {
    guard("cuKernelSetCacheConfig", || kernels().get(kernel).map(drop))
}

/// Each parameter's (offset, size) in a parameter buffer (the `extra` form, and
/// `cuFuncGetParamInfo`'s answer). Only sizes are known: each is aligned to the largest power
/// of two dividing its size, up to 16 (exact for scalars, pointers and vector types; a struct
/// of mixed members may be aligned less than that guess).
pub fn layout(sizes: &[u32]) -> Vec<(usize, usize)> {
    let mut at = 0usize;
    sizes
        .iter()
        .map(|&s| {
            let s = s as usize;
            let align = 1usize << s.max(1).trailing_zeros().min(4);
            let offset = at.next_multiple_of(align);
            at = offset + s;
            (offset, s)
        })
        .collect()
}
