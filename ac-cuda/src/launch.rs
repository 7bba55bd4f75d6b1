//! Kernel launches. `cuLaunchKernel` is given one pointer per parameter and no sizes: the
//! sizes come from the kernel's lookup (the backend asks its driver, `cuFuncGetParamInfo`,
//! or reads the image), and exactly those bytes are sent. A launch goes out without waiting;
//! its errors surface at the next synchronizing call.

use std::ffi::{c_uint, c_void};

use ac_frontend::{KernelArg, LaunchDims};

use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::module::kernels;
use crate::state;
use crate::stream::stream_of;

/// `CU_LAUNCH_PARAM_END`, `..._BUFFER_POINTER`, `..._BUFFER_SIZE`: the `extra` array's keys.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// Each parameter's (offset, size) in a parameter buffer: each aligned to its size (scalars
/// and pointers, the parameters the shim sends).
pub fn layout(sizes: &[u32]) -> Vec<(usize, usize)> {
    let mut at = 0usize;
    sizes
        .iter()
        .map(|&s| {
            let s = s as usize;
            let offset = at.next_multiple_of(s.clamp(1, 8));
            at = offset + s;
            (offset, s)
        })
        .collect()
}

/// One parameter's bytes as an SDK argument.
fn argument(kernel: &str, index: usize, bytes: &[u8]) -> CuResult<KernelArg> {
    match bytes.len() {
        4 => Ok(KernelArg::U32(u32::from_ne_bytes(bytes.try_into().expect("4 bytes")))),
        8 => Ok(KernelArg::U64(u64::from_ne_bytes(bytes.try_into().expect("8 bytes")))),
        n => Err(Error::said(
            code::NOT_SUPPORTED,
            format!(
                "kernel `{kernel}` parameter {index} is {n} bytes wide; the shim sends 4- and 8-byte parameters only"
            ),
        )),
    }
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
    if !params.is_null() {
        return layout
            .iter()
            .enumerate()
            .map(|(i, &(_, size))| {
                let p = *params.add(i);
                if p.is_null() {
                    return Err(Error::said(code::INVALID_VALUE, format!("kernel `{kernel}`: parameter {i} is null")));
                }
                argument(kernel, i, std::slice::from_raw_parts(p as *const u8, size))
            })
            .collect();
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
    layout.iter().enumerate().map(|(i, &(o, s))| argument(kernel, i, &bytes[o..o + s])).collect()
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

/// Launches kernel `function` with `dims` on `stream`.
unsafe fn launch(
    function: usize,
    dims: LaunchDims,
    stream: usize,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult<()> {
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
    let stream = stream_of(stream, device)?;
    let shim = state::shim()?;
    Ok(shim.block_on(resolved.function.launch_on(&stream, dims, &args))?)
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
        let dims =
            LaunchDims { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared_mem: shared };
        launch(function, dims, stream, params, extra)
    })
}

/// `CUlaunchConfig`.
#[repr(C)]
#[derive(Debug)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: usize,
    attrs: *const c_void,
    num_attrs: c_uint,
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
        if config.num_attrs != 0 {
            // Clusters, cooperative launches, priorities: not served; say so rather than
            // launch differently from what was asked.
            return Err(Error::said(code::NOT_SUPPORTED, "launch attributes are not supported on remote accelerators"));
        }
        let dims = LaunchDims { grid: config.grid, block: config.block, shared_mem: config.shared };
        launch(function, dims, config.stream, params, extra)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_aligned_to_their_size() {
        assert_eq!(layout(&[8, 4, 8, 4, 4, 8]), [(0, 8), (8, 4), (16, 8), (24, 4), (28, 4), (32, 8)]);
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
    fn a_parameter_of_another_width_is_refused_by_name() {
        let e = argument("k", 2, &[0u8; 16]).unwrap_err();
        assert_eq!(e.code(), code::NOT_SUPPORTED);
        assert!(e.to_string().contains("parameter 2 is 16 bytes"), "{e}");
    }
}
