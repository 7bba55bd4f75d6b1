//! Kernel launches. `cuLaunchKernel` is given one pointer per parameter and no sizes: the
//! sizes come from the kernel's lookup (the backend asks its driver, `cuFuncGetParamInfo`,
//! or reads the image), and exactly those bytes are sent. A launch goes out without waiting;
//! its errors surface at the next synchronizing call.

use std::ffi::{c_uint, c_void};
use std::sync::{Arc, OnceLock};

use ac_frontend::{KernelArg, LaunchDims};

use crate::error::{code, CuResult, Error};
use crate::graph::{self, NodeKind};
use crate::guard;
use crate::launch_config::{check_cluster, cluster_of, LaunchAttribute, LaunchConfig};
use crate::managed::{self, Reach};
use crate::module::{kernels, layout, Resolved};
use crate::state;
use crate::stream::stream_of;

/// `CU_LAUNCH_PARAM_END`, `..._BUFFER_POINTER`, `..._BUFFER_SIZE`: the `extra` array's keys.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// One parameter's bytes as SDK arguments: a 4- or 8-byte scalar, or the bytes of any other
/// width (a struct by value, a `char`) in order as 8-byte pieces, zero-padded, which the
/// backend lays in consecutive slots (`args::pieces` there).
fn argument(bytes: &[u8], out: &mut Vec<KernelArg>) {
    match bytes.len() {
        4 => out.push(KernelArg::U32(u32::from_ne_bytes(bytes.try_into().expect("4 bytes")))),
        8 => out.push(KernelArg::U64(u64::from_ne_bytes(bytes.try_into().expect("8 bytes")))),
        _ => out.extend(words_of(bytes).iter().map(|&word| KernelArg::U64(word))),
    }
}

/// Each parameter's bytes again from the arguments [`argument`] made of them, by their sizes.
fn parameter_bytes(sizes: &[u32], args: &[KernelArg]) -> Vec<Box<[u8]>> {
    let mut args = args.iter();
    let mut word = || match args.next() {
        Some(KernelArg::U32(v)) => v.to_ne_bytes().to_vec(),
        Some(KernelArg::U64(v)) => v.to_ne_bytes().to_vec(),
        _ => unreachable!("`argument` makes U32 and U64 pieces, as many as the sizes say"),
    };
    sizes
        .iter()
        .map(|&size| {
            let size = size as usize;
            let pieces = if size == 4 || size == 8 { 1 } else { size.div_ceil(8) };
            let mut bytes: Vec<u8> = (0..pieces).flat_map(|_| word()).collect();
            bytes.truncate(size);
            bytes.into_boxed_slice()
        })
        .collect()
}

/// `bytes` in 8-byte words, the last zero-padded.
fn words_of(bytes: &[u8]) -> Box<[u64]> {
    bytes
        .chunks(8)
        .map(|piece| {
            let mut word = [0u8; 8];
            word[..piece.len()].copy_from_slice(piece);
            u64::from_ne_bytes(word)
        })
        .collect()
}

/// The arguments of a launch, read through `params` (one pointer per parameter) or from the
/// `extra` parameter buffer.
unsafe fn arguments(
    kernel: &str,
    sizes: &[u32],
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult<Vec<KernelArg>> {
    let layout = layout(sizes);
    let mut args = Vec::with_capacity(layout.len());
    if !params.is_null() {
        for (i, &(_, size)) in layout.iter().enumerate() {
            let p = *params.add(i);
            if p.is_null() {
                return Err(Error::said(code::INVALID_VALUE, format!("kernel `{kernel}`: parameter {i} is null")));
            }
            argument(std::slice::from_raw_parts(p as *const u8, size), &mut args);
        }
        return Ok(args);
    }
    let (buffer, len) = parameter_buffer(extra)?;
    let needed = layout.last().map_or(0, |&(o, s)| o + s);
    if len < needed {
        return Err(Error::said(
            code::INVALID_VALUE,
            format!("kernel `{kernel}` takes {needed} bytes of parameters, the buffer holds {len}"),
        ));
    }
    let bytes = std::slice::from_raw_parts(buffer, len);
    for &(o, s) in &layout {
        argument(&bytes[o..o + s], &mut args);
    }
    Ok(args)
}

/// The parameter buffer an `extra` array names.
unsafe fn parameter_buffer(extra: *mut *mut c_void) -> CuResult<(*const u8, usize)> {
    let (mut buffer, mut size) = (std::ptr::null::<u8>(), None);
    let mut i = 0;
    if extra.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    loop {
        match *extra.add(i) as usize {
            PARAM_END => break,
            PARAM_BUFFER_POINTER => buffer = *extra.add(i + 1) as *const u8,
            PARAM_BUFFER_SIZE => size = Some(*(*extra.add(i + 1) as *const usize)),
            _ => return Err(Error::Code(code::INVALID_VALUE)),
        }
        i += 2;
    }
    match (buffer.is_null(), size) {
        (false, Some(size)) => Ok((buffer, size)),
        _ => Err(Error::Code(code::INVALID_VALUE)),
    }
}

/// Launches kernel `function` with `dims` on `stream` (or records the launch, if the stream
/// is capturing).
unsafe fn launch(
    function: usize,
    dims: LaunchDims,
    stream: usize,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    mode: Mode,
) -> CuResult<()> {
    let launch = prepare(function, dims, params, extra)?;
    let launch = launch.run_as(mode)?;
    if !graph::is_capturing(stream) {
        // The common case, with no allocation: sent at once.
        return launch.send(stream);
    }
    let launch = Arc::new(launch);
    let kept = launch.clone();
    graph::or_record_with(stream, NodeKind::Kernel, move || Some(kept), move |stream| launch.send(stream))
}

/// Launches kernel `function` with `dims` on `stream`, its parameters read from `bytes` as from
/// an `extra` parameter buffer (the legacy launch calls: [`crate::legacy_launch`]).
pub(crate) fn launch_with_buffer(function: usize, dims: LaunchDims, stream: usize, bytes: &[u8]) -> CuResult<()> {
    let mut size = bytes.len();
    let mut extra = [
        PARAM_BUFFER_POINTER as *mut c_void,
        bytes.as_ptr() as *mut c_void,
        PARAM_BUFFER_SIZE as *mut c_void,
        (&raw mut size).cast(),
        PARAM_END as *mut c_void,
    ];
    // SAFETY: `extra` is a well-formed parameter-buffer array whose buffer and size outlive the
    // call, which reads them before it returns.
    unsafe { launch(function, dims, stream, std::ptr::null_mut(), extra.as_mut_ptr(), Mode::Plain) }
}

/// How a launch runs its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Each block whenever the device has room for it.
    Plain,
    /// Every block resident at once (`cuLaunchCooperativeKernel`).
    Cooperative,
    /// In clusters of this many blocks (x, y, z) (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`).
    Clustered([u32; 3]),
}

/// Copies of a launch's parameters (each in 8-byte words, so aligned as any parameter may
/// need), and a pointer to each (as addresses).
type Copies = (Vec<Box<[u64]>>, Vec<usize>);

/// A launch with its arguments read: sent at once, or at each launch of a graph.
pub(crate) struct Prepared {
    /// The kernel's handle.
    function: usize,
    device: usize,
    resolved: Arc<Resolved>,
    dims: LaunchDims,
    args: Vec<KernelArg>,
    /// The parameters' bytes and a pointer to each, made when a graph's node is asked for them
    /// (`cuGraphKernelNodeGetParams`), valid while the launch is kept.
    copies: OnceLock<Copies>,
    /// How its blocks run.
    mode: Mode,
}

impl Prepared {
    /// The kernel's handle and the launch's dimensions.
    pub(crate) fn function_and_dims(&self) -> (usize, LaunchDims) {
        (self.function, self.dims)
    }

    /// One pointer per parameter to a copy of its bytes, as `kernelParams` holds them.
    pub(crate) fn parameter_pointers(&self) -> *mut *mut c_void {
        let (_, pointers) = self.copies.get_or_init(|| {
            let sizes = self.resolved.sizes.as_deref().unwrap_or_default();
            let words: Vec<Box<[u64]>> = parameter_bytes(sizes, &self.args).iter().map(|b| words_of(b)).collect();
            let pointers = words.iter().map(|w| w.as_ptr() as usize).collect();
            (words, pointers)
        });
        pointers.as_ptr() as *mut *mut c_void
    }

    /// Sends the launch on `stream`, after the managed memory it may reach.
    pub(crate) fn send(&self, stream: usize) -> CuResult<()> {
        let reach = [Reach::Kernel(self.device, stream)];
        let stream = stream_of(stream, self.device)?;
        let shim = state::shim()?;
        let function = &self.resolved.function;
        let send = || match self.mode {
            Mode::Plain => Ok(shim.block_on(function.launch_on(&stream, self.dims, &self.args))?),
            Mode::Cooperative => Ok(shim.block_on(function.launch_cooperative_on(&stream, self.dims, &self.args))?),
            Mode::Clustered(cluster) => {
                Ok(shim.block_on(function.launch_clustered_on(&stream, self.dims, cluster, &self.args))?)
            }
        };
        managed::device_work(&reach, send)
    }

    /// The same launch with every block resident at once: refused at once
    /// (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`) when the grid holds more blocks than the
    /// device does at a time, as CUDA's occupancy calculator counts them.
    fn cooperatively(mut self) -> CuResult<Self> {
        let (grid, block) = (self.dims.grid, self.dims.block);
        let threads = block.iter().map(|&d| u64::from(d)).product::<u64>(); // at most 2^96: no
        let shape_ok = !grid.contains(&0) && !block.contains(&0) && threads <= 1024; // overflow: u32s
        if !shape_ok || grid[1] > 65_535 || grid[2] > 65_535 || grid[0] > i32::MAX as u32 {
            return Err(Error::said(code::INVALID_VALUE, format!("a launch of {grid:?} blocks of {block:?} threads")));
        }
        let blocks = grid.iter().map(|&d| u64::from(d)).product::<u64>();
        let most = crate::occupancy::resident_blocks(self.function, &self.dims)?;
        if blocks > most {
            let why = format!("a cooperative launch of {blocks} blocks: the device holds {most} of them at once");
            return Err(Error::said(code::COOPERATIVE_LAUNCH_TOO_LARGE, why));
        }
        self.mode = Mode::Cooperative;
        Ok(self)
    }

    /// How its blocks run.
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// The same launch run as `mode` says (a plain one keeps what [`prepare`] made of it: the
    /// kernel's required clusters, if any).
    pub(crate) fn run_as(self, mode: Mode) -> CuResult<Self> {
        match mode {
            Mode::Plain => Ok(self),
            Mode::Cooperative => self.cooperatively(),
            Mode::Clustered(cluster) => self.in_clusters(cluster),
        }
    }

    /// The same launch in clusters of `cluster` blocks: refused at once when the cluster does
    /// not divide the grid (`CUDA_ERROR_INVALID_VALUE`) or holds more blocks than the kernel's
    /// clusters may (`CUDA_ERROR_INVALID_CLUSTER_SIZE`: 8, or 16 once it allows non-portable
    /// sizes), as CUDA refuses them.
    fn in_clusters(mut self, cluster: [u32; 3]) -> CuResult<Self> {
        check_cluster(self.dims.grid, cluster, self.resolved.attributes.most_cluster_blocks())?;
        self.mode = Mode::Clustered(cluster);
        Ok(self)
    }
}

/// Kernel `function`'s launch with `dims`: its device, and its arguments read through `params`
/// or `extra` now (as CUDA reads them when the call is made).
pub(crate) unsafe fn prepare(
    function: usize,
    dims: LaunchDims,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult<Prepared> {
    let kernel = kernels().get(function)?;
    let device = kernel.device()?;
    let resolved = kernel.on(device)?;
    let name = kernel.name.to_string_lossy();
    let Some(sizes) = &resolved.sizes else {
        return Err(Error::said(
            code::NOT_SUPPORTED,
            format!("kernel `{name}`: its parameter sizes are unknown (the backend's driver predates CUDA 12.4)"),
        ));
    };
    let args = arguments(&name, sizes, params, extra)?;
    if dims.shared_mem > 0 {
        let limit = resolved.attributes.max_dynamic_shared(&resolved.function)?;
        if dims.shared_mem > limit {
            return Err(Error::said(
                code::INVALID_VALUE,
                format!(
                    "kernel `{name}`: {} bytes of dynamic shared memory exceed its limit of {limit} \
                     (cuFuncSetAttribute with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES raises it)",
                    dims.shared_mem
                ),
            ));
        }
    }
    crate::module::warn_of_managed_variables(&kernel, device);
    let mode = match resolved.attributes.required_cluster() {
        Some(cluster) => {
            check_cluster(dims.grid, cluster, resolved.attributes.most_cluster_blocks())?;
            Mode::Clustered(cluster)
        }
        None => Mode::Plain,
    };
    Ok(Prepared { function, device, resolved, dims, args, copies: OnceLock::new(), mode })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuLaunchKernel(
    function: usize,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared: c_uint,
    stream: usize,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    guard("cuLaunchKernel", || {
        launch(
            function,
            dims_of([grid_x, grid_y, grid_z], [block_x, block_y, block_z], shared),
            stream,
            params,
            extra,
            Mode::Plain,
        )
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuLaunchCooperativeKernel(
    function: usize,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared: c_uint,
    stream: usize,
    params: *mut *mut c_void,
) -> u32 {
    guard("cuLaunchCooperativeKernel", || {
        let dims = dims_of([grid_x, grid_y, grid_z], [block_x, block_y, block_z], shared);
        launch(function, dims, stream, params, std::ptr::null_mut(), Mode::Cooperative)
    })
}

/// A launch's shape from the driver API's separate arguments.
fn dims_of(grid: [c_uint; 3], block: [c_uint; 3], shared_mem: c_uint) -> LaunchDims {
    LaunchDims { grid, block, shared_mem }
}

/// What a launch's attributes ask beyond the launch itself.
#[derive(Debug, Default)]
struct Asked {
    /// Events to record after it (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT` and
    /// `..._LAUNCH_COMPLETION_EVENT`).
    events: Vec<usize>,
    /// A cooperative launch (`CU_LAUNCH_ATTRIBUTE_COOPERATIVE`).
    cooperative: bool,
    /// A cluster shape of more than one block (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`).
    cluster: Option<[u32; 3]>,
}

impl Asked {
    /// How the launch runs its blocks.
    fn mode(&self) -> CuResult<Mode> {
        match (self.cooperative, self.cluster) {
            (false, None) => Ok(Mode::Plain),
            (true, None) => Ok(Mode::Cooperative),
            (false, Some(cluster)) => Ok(Mode::Clustered(cluster)),
            (true, Some(_)) => Err(Error::said(
                code::NOT_SUPPORTED,
                "a cooperative launch in clusters is not supported on remote accelerators",
            )),
        }
    }
}

/// What a launch's attributes ask: the attributes that change nothing here are let through,
/// those the remote GPU would have to honour and cannot refused.
fn asked_by(attributes: &[LaunchAttribute]) -> CuResult<Asked> {
    let refuse =
        |what: &str| Err(Error::said(code::NOT_SUPPORTED, format!("{what} are not supported on remote accelerators")));
    let mut asked = Asked::default();
    for attribute in attributes {
        match attribute.id {
            // Ignored entries; hints the launch may go without (an access policy window, a
            // scheduling or carveout preference, a priority, memory synchronization domains, a
            // preferred cluster shape, the portable cluster size and shared memory modes); and
            // programmatic stream serialization, which lets a launch overlap the one before:
            // running after it, as every launch does here, is what it allows.
            0 | 1 | 3 | 5 | 6 | 8 | 9 | 10 | 11 | 14 | 16 | 17 | 18 => {}
            2 => asked.cooperative = attribute.word(0) != 0,
            4 => asked.cluster = cluster_of(attribute),
            // The event is reached once all blocks triggered or finished: after the kernel, at
            // the latest, which is when it is recorded here.
            7 | 12 => {
                crate::stream::check_event(attribute.handle())?;
                asked.events.push(attribute.handle());
            }
            13 if attribute.word(0) == 0 => {}
            13 => return refuse("device-updatable kernel nodes"),
            id => return refuse(&format!("launch attribute {id}")),
        }
    }
    Ok(asked)
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const LaunchConfig,
    function: usize,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    guard("cuLaunchKernelEx", || {
        let config = config.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
        let asked = asked_by(config.attributes()?)?;
        let dims = config.dims_in(config.grid);
        launch(function, dims, config.stream, params, extra, asked.mode()?)?;
        asked.events.into_iter().try_for_each(|event| crate::stream::record(event, config.stream))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_aligned_to_their_size() {
        assert_eq!(layout(&[8, 4, 8, 4, 4, 8]), [(0, 8), (8, 4), (16, 8), (24, 4), (28, 4), (32, 8)]);
        assert_eq!(layout(&[1, 12, 2, 16]), [(0, 1), (4, 12), (16, 2), (32, 16)]);
    }

    #[test]
    fn a_parameter_buffer_is_split_by_the_layout() {
        let mut buffer = [0u8; 16];
        buffer[..8].copy_from_slice(&0xdead_beef_0000_0001u64.to_ne_bytes());
        buffer[8..12].copy_from_slice(&7u32.to_ne_bytes());
        let mut size = buffer.len();
        let mut extra = [
            PARAM_BUFFER_POINTER as *mut c_void,
            buffer.as_mut_ptr() as *mut c_void,
            PARAM_BUFFER_SIZE as *mut c_void,
            &mut size as *mut usize as *mut c_void,
            PARAM_END as *mut c_void,
        ];
        let args = unsafe { arguments("k", &[8, 4], std::ptr::null_mut(), extra.as_mut_ptr()) }.unwrap();
        assert_eq!(args, [KernelArg::U64(0xdead_beef_0000_0001), KernelArg::U32(7)]);
        let short = unsafe { arguments("k", &[8, 8, 8], std::ptr::null_mut(), extra.as_mut_ptr()) };
        assert_eq!(short.unwrap_err().code(), code::INVALID_VALUE);
    }

    #[test]
    fn a_parameter_of_another_width_travels_as_8_byte_pieces() {
        let mut args = Vec::new();
        let bytes: Vec<u8> = (1..=12).collect();
        argument(&bytes, &mut args);
        argument(&[9], &mut args);
        assert_eq!(args, [KernelArg::U64(0x0807_0605_0403_0201), KernelArg::U64(0x0c0b_0a09), KernelArg::U64(9)]);
    }

    #[test]
    fn parameters_read_back_are_the_bytes_given() {
        let given: [&[u8]; 5] =
            [&[1, 2, 3, 4], &(5..=16).collect::<Vec<u8>>(), &[17], &(18..=25).collect::<Vec<u8>>(), &[]];
        let mut args = Vec::new();
        given.iter().for_each(|p| argument(p, &mut args));
        let sizes: Vec<u32> = given.iter().map(|p| p.len() as u32).collect();
        let back = parameter_bytes(&sizes, &args);
        assert_eq!(back.iter().map(|b| &b[..]).collect::<Vec<_>>(), given);
    }
}
