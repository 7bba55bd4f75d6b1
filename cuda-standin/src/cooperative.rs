//! Cooperative launches (`cuLaunchCooperativeKernel`): a launch whose blocks must all be
//! resident at once, refused (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`) when the grid holds
//! more blocks than the device does; the kernel then runs as any other.

use std::ffi::{c_uint, c_void};

use crate::state::{MULTIPROCESSORS, THREADS_PER_MULTIPROCESSOR};
use crate::{code, launch, Handle};

/// Blocks a multiprocessor holds at once, at most: a cooperative launch's bound with the
/// thread limit (64 warps a multiprocessor), as on an H100.
const RESIDENT_BLOCKS: u64 = 32;

#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver API's signature
pub unsafe extern "C" fn cuLaunchCooperativeKernel(
    function: Handle,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
) -> u32 {
    // Every block resident at once: no more than the multiprocessors hold.
    let product = |dims: [c_uint; 3]| dims.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
    let warps = product([block_x, block_y, block_z]).div_ceil(32).max(1);
    let per_multiprocessor = (THREADS_PER_MULTIPROCESSOR / 32 / warps).min(RESIDENT_BLOCKS);
    if product([grid_x, grid_y, grid_z]) > per_multiprocessor * MULTIPROCESSORS {
        return code::COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    let shape = [grid_x, grid_y, grid_z, block_x, block_y, block_z];
    launch("cuLaunchCooperativeKernel", function, shape, shared, stream, params, std::ptr::null_mut())
}
