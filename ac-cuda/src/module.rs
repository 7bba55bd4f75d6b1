//! Module images and kernels. A library (`cuLibraryLoadData`, how the CUDA runtime registers
//! a program's fat binaries) belongs to no context: it is uploaded to a device the first time
//! one of its kernels runs there. A module (`cuModuleLoadData`) is loaded at once on the
//! current device, so that a bad image fails the call that loads it. A kernel's parameter
//! sizes come with its lookup (backend protocol 7) and are kept per device.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

use ac_frontend::{Function, Module};
use ac_proto::backend::ModuleSource;

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
        let r = Arc::new(Resolved { function, sizes });
        resolved.insert(device, r.clone());
        Ok(r)
    }
}

/// Loads the image at `ptr` as a library, or as a module on the current device.
unsafe fn load(ptr: *const c_void, module: bool) -> CuResult<usize> {
    let (kind, bytes) = image::read(ptr as *const u8)?;
    let bound = if module { Some(current_device()?) } else { None };
    let image = Image { kind, bytes, bound, loaded: Mutex::default(), kernels: Mutex::default() };
    if let Some(device) = bound {
        image.on(device)?;
    }
    Ok(images().insert(image))
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

/// Unloads an image from every device it was uploaded to.
fn unload(handle: usize) -> CuResult<()> {
    let image = images().remove(handle)?;
    let modules: Vec<Module> = image.loaded.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, m)| m).collect();
    for k in image.kernels.lock().unwrap_or_else(|p| p.into_inner()).drain() {
        let _ = kernels().remove(k.1);
    }
    let shim = state::shim()?;
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
    _count: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
) -> u32 {
    guard("cuModuleLoadDataEx", || put(out, load(image, true)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadFatBinary(out: *mut usize, image: *const c_void) -> u32 {
    guard("cuModuleLoadFatBinary", || put(out, load(image, true)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoad(out: *mut usize, path: *const c_char) -> u32 {
    guard("cuModuleLoad", || {
        if path.is_null() {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let path = CStr::from_ptr(path).to_string_lossy().into_owned();
        let mut bytes = std::fs::read(&path).map_err(|e| Error::said(301, format!("{path}: {e}")))?;
        bytes.push(0); // PTX is read as C text
        put(out, load(bytes.as_ptr() as *const c_void, true)?)
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
pub unsafe extern "C" fn cuModuleGetLoadingMode(mode: *mut c_int) -> u32 {
    // CU_MODULE_LAZY_LOADING: libraries are uploaded when first used.
    guard("cuModuleGetLoadingMode", || put(mode, 2))
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryLoadData(
    out: *mut usize,
    code: *const c_void,
    _jit_options: *mut c_int,
    _jit_values: *mut *mut c_void,
    _jit_count: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
    _count: c_uint,
) -> u32 {
    guard("cuLibraryLoadData", || put(out, load(code, false)?))
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

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetParamInfo(
    function: usize,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> u32 {
    guard("cuFuncGetParamInfo", || {
        let k = kernels().get(function)?;
        let sizes = k.on(k.device()?)?.sizes.clone().ok_or(Error::Code(code::NOT_SUPPORTED))?;
        let layout = layout(&sizes);
        let &(at, width) = layout.get(index).ok_or(Error::Code(code::INVALID_VALUE))?;
        put(offset, at)?;
        put(size, width)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(value: *mut c_int, attribute: c_int, function: usize) -> u32 {
    guard("cuFuncGetAttribute", || {
        let k = kernels().get(function)?;
        put(value, function_attribute(k.device()?, attribute)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuKernelGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    kernel: usize,
    device: c_int,
) -> u32 {
    guard("cuKernelGetAttribute", || {
        kernels().get(kernel)?;
        put(value, function_attribute(device as usize, attribute)?)
    })
}

/// A kernel attribute: the architecture's limits (the image's resource use is not known here).
fn function_attribute(device: usize, attribute: c_int) -> CuResult<c_int> {
    let shim = state::shim()?;
    let d = shim.devices.get(device).ok_or(Error::Code(code::INVALID_DEVICE))?;
    let (major, minor) = crate::init::capability(d);
    Ok(match attribute {
        0 => 1024,                   // max threads per block
        1..=3 => 0,                  // static shared, constant, local bytes
        4 => 32,                     // registers per thread
        5 | 6 => major * 10 + minor, // PTX and binary versions
        7 => 0,                      // cache mode
        8 => 48 << 10,               // max dynamic shared memory
        9 => -1,                     // preferred shared memory carveout
        _ => 0,
    })
}

#[no_mangle]
pub extern "C" fn cuFuncSetAttribute(function: usize, _attribute: c_int, _value: c_int) -> u32 {
    // Accepted and not forwarded: a launch that needs more than the defaults fails remotely.
    guard("cuFuncSetAttribute", || kernels().get(function).map(drop))
}

#[no_mangle]
pub extern "C" fn cuKernelSetAttribute(_attribute: c_int, _value: c_int, kernel: usize, _device: c_int) -> u32 {
    guard("cuKernelSetAttribute", || kernels().get(kernel).map(drop))
}

#[no_mangle]
pub extern "C" fn cuFuncSetCacheConfig(function: usize, _config: c_int) -> u32 {
    guard("cuFuncSetCacheConfig", || kernels().get(function).map(drop))
}

#[no_mangle]
pub extern "C" fn cuKernelSetCacheConfig(kernel: usize, _config: c_int, _device: c_int) -> u32 {
    guard("cuKernelSetCacheConfig", || kernels().get(kernel).map(drop))
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    blocks: *mut c_int,
    function: usize,
    block_size: c_int,
    dynamic_shared: usize,
) -> u32 {
    guard("cuOccupancyMaxActiveBlocksPerMultiprocessor", || {
        if block_size <= 0 {
            return Err(Error::Code(code::INVALID_VALUE));
        }
        let limits = Limits::of_function(function)?;
        put(blocks, limits.blocks_per_multiprocessor(block_size, dynamic_shared))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    blocks: *mut c_int,
    function: usize,
    block_size: c_int,
    dynamic_shared: usize,
    _flags: c_uint,
) -> u32 {
    cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, function, block_size, dynamic_shared)
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyAvailableDynamicSMemPerBlock(
    dynamic_shared: *mut usize,
    function: usize,
    blocks: c_int,
    block_size: c_int,
) -> u32 {
    guard("cuOccupancyAvailableDynamicSMemPerBlock", || {
        let limits = Limits::of_function(function)?;
        // As CUDA's calculator: blocks that cannot all fit, even without shared memory, are
        // an invalid request.
        let available = limits.available_dynamic_shared(blocks, block_size).ok_or(Error::Code(code::INVALID_VALUE))?;
        put(dynamic_shared, available)
    })
}

/// What bounds how many blocks share a multiprocessor, as the device's attributes say
/// (`init::attribute_of`: its architecture's limits), counted as CUDA's occupancy calculator
/// counts them (`cuda_occupancy.h`). A kernel's registers and static shared memory are not known
/// here (its image is on the backend): counted as none, as `function_attribute` answers them.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Threads per block, at most.
    threads_per_block: c_int,
    /// Threads per multiprocessor.
    threads: c_int,
    /// Blocks per multiprocessor.
    blocks: c_int,
    /// Shared memory per multiprocessor, bytes.
    shared: usize,
    /// Shared memory a block may have, bytes, the system's reservation included: the default
    /// limit, since a kernel's raised limit (`cuFuncSetAttribute`) is not forwarded and its
    /// launch gets the default.
    shared_per_block: usize,
    /// Shared memory the system reserves for each block, bytes.
    reserved: usize,
    /// Multiprocessors on the device.
    multiprocessors: c_int,
}

/// Shared memory is given to blocks in units of this many bytes.
const SHARED_UNIT: usize = 128;

/// Threads in a warp: a block takes whole warps, and block sizes are tried in its multiples.
const WARP: c_int = 32;

impl Limits {
    /// The limits of the device `function` was loaded on.
    fn of_function(function: usize) -> CuResult<Self> {
        let k = kernels().get(function)?;
        let shim = state::shim()?;
        let d = shim.devices.get(k.device()?).ok_or(Error::Code(code::INVALID_DEVICE))?;
        let attribute = |a| crate::init::attribute_of(d, 0, a);
        let bytes = |a| usize::try_from(attribute(a)).unwrap_or(0);
        Ok(Self {
            threads_per_block: attribute(1),
            threads: attribute(39),
            blocks: attribute(106),
            shared: bytes(81),
            shared_per_block: bytes(8),
            reserved: bytes(111),
            multiprocessors: attribute(16),
        })
    }

    /// How many blocks of `block_size` threads, each with `dynamic_shared` bytes of dynamic
    /// shared memory, fit on one multiprocessor (0: not even one).
    fn blocks_per_multiprocessor(&self, block_size: c_int, dynamic_shared: usize) -> c_int {
        if block_size <= 0 || block_size > self.threads_per_block {
            return 0;
        }
        let Some(per_block) = dynamic_shared.checked_add(self.reserved) else { return 0 };
        let per_block = per_block.next_multiple_of(SHARED_UNIT).max(SHARED_UNIT);
        if per_block > self.shared_per_block {
            return 0;
        }
        let by_shared = c_int::try_from(self.shared / per_block).unwrap_or(c_int::MAX);
        let by_warps = (self.threads / WARP) / ((block_size + WARP - 1) / WARP);
        by_warps.min(self.blocks).min(by_shared)
    }

    /// The block size (`limit` at most when positive; the limit itself, then the multiples of
    /// the warp below it) that keeps the most threads resident on a multiprocessor, the larger
    /// on a tie, with each block's dynamic shared memory as `shared` says for its size; and how
    /// many such blocks fit. (0, 0) when none fits.
    fn best_block_size(&self, limit: c_int, shared: impl Fn(c_int) -> usize) -> (c_int, c_int) {
        let most = if limit > 0 { limit.min(self.threads_per_block) } else { self.threads_per_block };
        let mut best = (0, 0);
        let mut aligned = (most + WARP - 1) / WARP * WARP;
        while aligned > 0 {
            let size = aligned.min(most);
            let blocks = self.blocks_per_multiprocessor(size, shared(size));
            if blocks * size > best.0 * best.1 {
                best = (size, blocks);
            }
            aligned -= WARP;
        }
        best
    }

    /// The most dynamic shared memory each of `blocks` blocks of `block_size` threads may have
    /// for all of them to fit on one multiprocessor; `None` when they cannot, even without any.
    fn available_dynamic_shared(&self, blocks: c_int, block_size: c_int) -> Option<usize> {
        if blocks <= 0 || self.blocks_per_multiprocessor(block_size, 0) < blocks {
            return None;
        }
        // One block may have all that a block may; more share the multiprocessor's.
        let pool = if blocks == 1 { self.shared_per_block } else { self.shared };
        let share = (pool / blocks as usize) / SHARED_UNIT * SHARED_UNIT;
        Some(share.min(self.shared_per_block).saturating_sub(self.reserved))
    }
}

/// `CUoccupancyB2DSize`: the dynamic shared memory a kernel needs for a block size.
type SharedOfBlock = Option<unsafe extern "C" fn(c_int) -> usize>;

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSize(
    min_grid: *mut c_int,
    block: *mut c_int,
    function: usize,
    shared_of_block: SharedOfBlock,
    dynamic_shared: usize,
    limit: c_int,
) -> u32 {
    guard("cuOccupancyMaxPotentialBlockSize", || {
        let limits = Limits::of_function(function)?;
        let shared = |size| match shared_of_block {
            // SAFETY: the caller's function, called as CUDA's occupancy calculator calls it.
            Some(f) => unsafe { f(size) },
            None => dynamic_shared,
        };
        let (size, blocks) = limits.best_block_size(limit, shared);
        put(block, size)?;
        put(min_grid, blocks * limits.multiprocessors)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSizeWithFlags(
    min_grid: *mut c_int,
    block: *mut c_int,
    function: usize,
    shared_of_block: SharedOfBlock,
    dynamic_shared: usize,
    limit: c_int,
    _flags: c_uint,
) -> u32 {
    cuOccupancyMaxPotentialBlockSize(min_grid, block, function, shared_of_block, dynamic_shared, limit)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A Hopper multiprocessor's limits, as `init::attribute_of` gives them.
    const HOPPER: Limits = Limits {
        threads_per_block: 1024,
        threads: 2048,
        blocks: 32,
        shared: 228 << 10,
        shared_per_block: 48 << 10,
        reserved: 1 << 10,
        multiprocessors: 132,
    };

    #[test]
    fn blocks_are_bounded_by_warps_blocks_and_shared_memory() {
        assert_eq!(HOPPER.blocks_per_multiprocessor(256, 0), 8, "64 warps");
        assert_eq!(HOPPER.blocks_per_multiprocessor(100, 0), 16, "100 threads take 4 warps");
        assert_eq!(HOPPER.blocks_per_multiprocessor(32, 0), 32, "32 blocks");
        // 40 KiB each, 1 KiB reserved: five of 41 KiB fit in 228 KiB, six do not.
        assert_eq!(HOPPER.blocks_per_multiprocessor(128, 40 << 10), 5);
        assert_eq!(HOPPER.blocks_per_multiprocessor(128, 47 << 10), 4, "47 KiB + 1 KiB: the default limit");
        assert_eq!(HOPPER.blocks_per_multiprocessor(128, (47 << 10) + 1), 0, "over the default limit");
        assert_eq!(HOPPER.blocks_per_multiprocessor(128, usize::MAX), 0);
        assert_eq!(HOPPER.blocks_per_multiprocessor(2048, 0), 0, "over the block's thread limit");
        assert_eq!(HOPPER.blocks_per_multiprocessor(0, 0), 0);
    }

    #[test]
    fn the_dynamic_shared_memory_available_lets_exactly_that_many_blocks_fit() {
        for block_size in [32, 64, 100, 128, 256, 512, 1024] {
            for blocks in 1..=HOPPER.blocks_per_multiprocessor(block_size, 0) {
                let available = HOPPER.available_dynamic_shared(blocks, block_size).expect("they fit");
                let fit = HOPPER.blocks_per_multiprocessor(block_size, available);
                assert!(fit >= blocks, "{blocks} x {block_size}: {available} bytes let {fit} fit");
                let more = HOPPER.blocks_per_multiprocessor(block_size, available + SHARED_UNIT);
                assert!(
                    more < blocks,
                    "{blocks} x {block_size}: {available} + {SHARED_UNIT} bytes still let {more} fit"
                );
            }
        }
        assert_eq!(HOPPER.available_dynamic_shared(1, 1024), Some(47 << 10), "one block: the default limit");
        // cuda_occupancy.h's figure for 8 blocks of 256 on Hopper: 228 KiB / 8, less the reserve.
        assert_eq!(HOPPER.available_dynamic_shared(8, 256), Some(29_184 - 1024));
        assert_eq!(HOPPER.available_dynamic_shared(3, 1024), None, "three blocks of 1,024 threads never fit");
        assert_eq!(HOPPER.available_dynamic_shared(0, 256), None);
    }

    #[test]
    fn the_best_block_size_keeps_the_most_threads_resident() {
        // No shared memory: 1,024 threads a block, two blocks, 2,048 threads (the largest of the
        // sizes that reach them).
        assert_eq!(HOPPER.best_block_size(0, |_| 0), (1024, 2));
        // Up to 200: 200 itself (7 warps, 9 blocks) keeps 1,800; 128 x 16 and 64 x 32 keep
        // 2,048: the larger.
        assert_eq!(HOPPER.best_block_size(200, |_| 0), (128, 16));
        assert_eq!(HOPPER.best_block_size(16, |_| 0), (16, 32), "a limit under a warp is tried");
        // 100 bytes a thread: 512 threads and more are over the default limit; 256 x 8 keeps
        // 2,048 (26.6 KiB each), more than any other size.
        assert_eq!(HOPPER.best_block_size(0, |size| size as usize * 100), (256, 8));
        assert_eq!(HOPPER.best_block_size(0, |_| 48 << 10), (0, 0), "nothing fits");
    }
}
